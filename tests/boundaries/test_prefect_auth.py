"""Issue 28: on a shared machine, ``ODQA_PREFECT_AUTH=on`` makes the workspace's Prefect server
require its auth string. Another user's process (no auth string) is refused; the project's own
commands find the string beside the server and keep working."""

from __future__ import annotations

import base64
import json
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from odqa.flows.backend.auth import AUTH_FILE
from odqa.flows.backend.local_server import ServerPaths, read_record, reset_server
from tests.ops.cli_process import cli_env, odqa
from tests.ops.input_files import PASSAGES, write_passages

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _status(url: str, auth: str | None = None, body: dict | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def test_with_the_auth_setting_only_the_projects_commands_get_in(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    env = {**cli_env(tmp_path), "ODQA_PREFECT_AUTH": "on"}
    try:
        first = odqa(env, "-w", ws, "import", "passages", "--format", "dpr-tsv",
                     write_passages(tmp_path / "p.tsv", PASSAGES))  # fmt: skip
        assert first.returncode == 0, first.stderr
        record = read_record(ws)
        secret = ServerPaths(ws).home / AUTH_FILE
        assert record is not None and stat.S_IMODE(secret.stat().st_mode) == 0o600
        auth = secret.read_text(encoding="utf-8").strip()
        assert _status(f"{record.api_url}/health") == 200  # liveness stays open (the project's own check)
        token = f"{record.api_url}/csrf-token?client=probe"
        assert _status(token) == 401 and _status(token, auth="odqa:guess") == 401
        assert _status(token, auth=auth) == 200
        assert _status(f"{record.api_url}/flows/filter", body={}) == 403  # and writes need a CSRF token besides

        # A later command, with the setting off in its environment, still gets in.
        listed = odqa(cli_env(tmp_path), "-w", ws, "deployments")
        assert listed.returncode == 0, listed.stderr
        status = odqa(cli_env(tmp_path), "-w", ws, "server", "status")
        assert f"auth string: on (the API answers 401 without the secret in {secret})" in status.stdout, status.stdout
        assert "ODQA_PREFECT_AUTH is off now" in status.stdout and "the server reads it" in status.stdout
    finally:
        reset_server(ws)
