"""Issue 41: what an odqa verb creates in a workspace (tables, snapshot, catalog, folders, its log)
is readable by its owner only, unless $ODQA_UMASK says otherwise; a log an older odqa created
0644 is tightened when it is appended to; the caller's own umask is given back after the call
(`flows.backend.file_modes`). Runs `odqa import passages` in-process under the session's server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odqa.storage import Workspace
from tests.ops.input_files import PASSAGES, write_passages


def _modes(root: Path, skip: set[Path] = frozenset()) -> dict[str, int]:
    """Permission bits of everything under ``root`` (and ``root``), but ``skip``."""
    return {str(p.relative_to(root.parent)): p.stat().st_mode & 0o777
            for p in [root, *root.rglob("*")] if p not in skip}  # fmt: skip


def _import(cli, ws: Path, tmp_path: Path) -> None:
    cli("-w", str(ws), "import", "passages", "--format", "dpr-tsv", str(write_passages(tmp_path / "p.tsv", PASSAGES)))


@pytest.fixture
def caller_umask() -> int:
    """The test process's umask (022, as a user's shell has it) for the test, restored after."""
    previous = os.umask(0o022)
    yield 0o022
    os.umask(previous)


def test_a_verb_creates_owner_only_files_and_tightens_an_old_log(cli, tmp_path: Path, caller_umask: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.delenv("ODQA_UMASK", raising=False)
    ws = tmp_path / "ws"
    owner_only = os.umask(0o077)
    try:
        Workspace.resolve(ws)  # a workspace an older odqa made (its marker owner-only, as odqa writes it now)
    finally:
        os.umask(owner_only)
    old_log = ws / "logs" / "odqa.log"
    old_log.parent.mkdir(parents=True)
    old_log.write_text("a line from an older odqa\n")
    old_log.chmod(0o644)
    _import(cli, ws, tmp_path)
    created = _modes(ws, skip={ws, old_log.parent})
    assert any(name.endswith(".parquet") for name in created) and "ws/snapshot.json" in created
    wider = {name: oct(mode) for name, mode in created.items() if mode not in (0o600, 0o700)}
    assert not wider, f"readable by others: {wider}"
    assert old_log.stat().st_mode & 0o777 == 0o600 and "older odqa" in old_log.read_text()
    assert os.umask(caller_umask) == caller_umask, "the caller's umask was not given back"


def test_odqa_umask_022_gives_the_usual_modes_and_a_bad_one_is_refused(cli, tmp_path: Path, caller_umask: int,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("ODQA_UMASK", "022")
    ws = tmp_path / "ws"
    _import(cli, ws, tmp_path)
    modes = _modes(ws)
    assert (ws / "logs" / "odqa.log").stat().st_mode & 0o777 == 0o644
    assert set(modes.values()) <= {0o644, 0o755} and 0o644 in modes.values(), modes
    monkeypatch.setenv("ODQA_UMASK", "rw-r--r--")
    refused = cli("-w", str(ws), "server", "list", ok=False)
    assert refused.exit_code == 1 and "ODQA_UMASK='rw-r--r--': expected an octal umask" in refused.output
