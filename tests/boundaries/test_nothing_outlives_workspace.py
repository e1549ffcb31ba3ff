"""Issue 41: nothing outlives its workspace.

A workspace's background Prefect server always has a watchdog while it runs: `odqa server list`
says so, and one that was killed is replaced by `server list` and by the next verb's
`ensure_server`; a check that fails is logged and the watch goes on. Once the workspace folder is
gone, or replaced by another folder at the same path, the server is stopped, and killed (with its
process group) when it ignores SIGTERM. No background process makes a deleted workspace's
folders again (a service following its releases, a stop, the watchdog, `server list`).

One real background server for the module, with a watch period of 1 s and a stop timeout of 2 s."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odqa.flows.backend.database import database_name
from odqa.flows.backend.local_server import (
    ServerRecord,
    ensure_server,
    is_prefect_server,
    process_alive,
    read_record,
    stop_server,
)
from odqa.flows.backend.postgres import PostgresUnavailable, local_cluster
from odqa.flows.plumbing.server import list_lines
from odqa.service.app import create_app
from odqa.storage import Workspace
from tests.ops.test_server_lifecycle import wait_for
from tests.serve.harness import ServiceThread

WATCH_ENV = {"ODQA_PREFECT_WATCH_S": "1", "ODQA_PREFECT_STOP_TIMEOUT": "2", "ODQA_PREFECT_PORT": "0"}


def _reap(pid: int) -> None:
    """Collect a process this test process started (a killed server or watchdog)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def watchdogs_of(server_pid: int) -> list[int]:
    """Live watchdog processes watching ``server_pid`` (``... flows.backend.watchdog PID ...``)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError, ValueError):
            argv = entry.read_bytes().decode(errors="replace").split("\0")
            at = [i for i, arg in enumerate(argv) if arg.endswith("flows.backend.watchdog")]
            if at and argv[at[0] + 1 : at[0] + 2] == [str(server_pid)]:
                found.append(int(entry.parent.name))
    return found


@pytest.fixture(scope="module", autouse=True)
def quick_watch() -> Iterator[None]:
    """Every server and watchdog of this module looks every second and kills after 2 s."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in WATCH_ENV.items():
            patch.setenv(name, value)
        yield


def _row(pid: int) -> str:
    """The server's one row in `odqa server list`."""
    rows = [line for line in list_lines() if line.split()[:1] == [str(pid)]]
    assert len(rows) == 1, rows
    return rows[0]


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory, quick_watch: None) -> Iterator[tuple[Path, ServerRecord]]:
    """A workspace's background server and watchdog, started as a verb starts them; killed and its
    database dropped after (the workspace is not made again for that)."""
    ws = tmp_path_factory.mktemp("outlive") / "ws"
    record = ensure_server(ws).record
    try:
        yield ws, record
    finally:
        if is_prefect_server(record.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(record.pid, signal.SIGKILL)
        _reap(record.pid)
        if record.backend == "postgresql":
            with contextlib.suppress(PostgresUnavailable, RuntimeError):
                local_cluster().drop_database(database_name(ws))


def test_server_list_says_yes_for_a_running_watchdog(watched: tuple[Path, ServerRecord]) -> None:
    ws, record = watched
    assert watchdogs_of(record.pid) == [record.watchdog_pid]
    row = _row(record.pid)
    assert row.split()[3] == "yes" and str(ws) in row, row


def test_a_killed_watchdog_is_replaced_by_server_list_and_by_the_next_verb(watched: tuple[Path, ServerRecord]) -> None:
    ws, record = watched
    os.kill(record.watchdog_pid, signal.SIGKILL)
    assert wait_for(lambda: not watchdogs_of(record.pid), 10)
    _reap(record.watchdog_pid)
    assert _row(record.pid).split()[3] == "started"
    replaced = read_record(ws).watchdog_pid
    assert watchdogs_of(record.pid) == [replaced] and replaced != record.watchdog_pid, "server list started none"
    assert _row(record.pid).split()[3] == "yes"

    os.kill(replaced, signal.SIGKILL)
    assert wait_for(lambda: not watchdogs_of(record.pid), 10)
    _reap(replaced)
    status = ensure_server(ws)
    assert status.record.pid == record.pid and not status.started
    assert watchdogs_of(record.pid) == [read_record(ws).watchdog_pid], "the next verb started no watchdog"


def test_a_watchdog_whose_check_fails_logs_it_and_watches_on(watched: tuple[Path, ServerRecord]) -> None:
    ws, record = watched
    foreground = ws / "prefect" / "foreground.json"  # a `./run server` record no pid can have: the check raises
    foreground.write_text(json.dumps({"pid": 10**30, "worker_pid": 10**30, "started": "now"}))
    log = ws / "prefect-logs" / "server.log"
    try:
        assert wait_for(lambda: "a check of the server" in log.read_text(errors="replace"), 10), log.read_text()
        time.sleep(2)
        assert watchdogs_of(record.pid) and is_prefect_server(record.pid), "the watch ended"
    finally:
        foreground.unlink()
    assert log.stat().st_mode & 0o777 == 0o600


def test_a_server_that_ignores_sigterm_is_killed_once_its_workspace_is_replaced_and_nothing_makes_it_again(
        watched: tuple[Path, ServerRecord]) -> None:  # fmt: skip
    ws, record = watched
    watchdogs = watchdogs_of(record.pid)
    os.kill(record.pid, signal.SIGSTOP)  # a stopped process leaves SIGTERM pending: only SIGKILL ends it
    ws.rename(ws.with_name("ws-before"))  # another folder at the same path, with a server folder of its own
    (ws / "prefect" / "home").mkdir(parents=True)
    assert wait_for(lambda: not is_prefect_server(record.pid), 1 + 2 + 8), "the server outlived its workspace"
    assert wait_for(lambda: not any(map(process_alive, watchdogs)), 5), "its watchdog did not end with it"

    shutil.rmtree(ws)
    shutil.rmtree(ws.with_name("ws-before"))
    assert stop_server(ws) is None
    list_lines()
    time.sleep(1.5)  # a watch period more: a watchdog, had one lived on, would have looked again
    assert not ws.exists(), f"made again: {sorted(str(p) for p in ws.rglob('*'))}"


def test_a_service_following_a_deleted_workspace_does_not_make_it_again(tmp_path: Path) -> None:
    ws = Workspace.resolve(tmp_path / "ws").root
    with ServiceThread(create_app(ws, poll_s=0.1)) as service:
        shutil.rmtree(ws)
        time.sleep(1)  # ten polls of the release pointer
        assert not ws.exists(), f"made again: {sorted(str(p) for p in ws.rglob('*'))}"
        assert service.server.started
