"""The hint printed when a verb starts the workspace's Prefect server names the stop command that
works where the user is: `./run server stop` in this checkout, `odqa server stop` anywhere else
(an installed odqa has no `./run`; another checkout's `./run` runs another odqa)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from odqa.flows.backend.local_server import stop_command

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_workspace_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ODQA_WORKSPACE", raising=False)


def test_in_the_checkout_the_hint_is_run_server_stop(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert (CHECKOUT / "run").is_file()
    monkeypatch.chdir(CHECKOUT)
    assert stop_command(CHECKOUT / "workspace") == "./run server stop"
    other = tmp_path / "my ws"
    assert stop_command(other) == f"./run server stop -w {shlex.quote(str(other))}"
    assert shlex.split(stop_command(other))[-1] == str(other)  # the shell hands -w the whole path


def test_elsewhere_the_hint_is_odqa_server_stop(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert stop_command(tmp_path / "workspace") == "odqa server stop"
    other = tmp_path / "my ws"
    assert stop_command(other) == f"odqa -w {shlex.quote(str(other))} server stop"
    another_checkout = tmp_path / "clone"
    another_checkout.mkdir()
    (another_checkout / "run").write_text("#!/usr/bin/env bash\n")
    monkeypatch.chdir(another_checkout)  # its ./run would stop a server with the clone's odqa, not this one
    assert stop_command(another_checkout / "workspace") == "odqa server stop"
