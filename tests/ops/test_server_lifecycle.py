"""The lifecycle of the processes odqa leaves running: `./run server` and its worker stop on
SIGTERM and on `./run server stop`; a background server stops by itself when its workspace
folder is deleted or when it has been idle; a killed PostgreSQL postmaster is noticed by the
next verb, which succeeds; `./run postgres stop` refuses while workspaces use the cluster.

The postmaster is killed in a private cluster in a temporary folder ($ODQA_POSTGRES_DIR), never
in the cluster the other test sessions on this machine share."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from odqa.flows.backend.database import database_name
from odqa.flows.backend.local_server import (
    ensure_server,
    foreground_running,
    is_prefect_server,
    process_alive,
    read_record,
    reset_server,
    running_server,
)
from odqa.flows.backend.postgres import PostgresUnavailable, local_cluster
from tests.ops.cli_process import REPO_ROOT, cli_env, odqa

PR_SET_CHILD_SUBREAPER = 36  # prctl(2)


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (the worker and the flow runs it started)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(stat.parent.name))
    return members


def start_run_server(ws: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen, dict]:
    """`./run server --no-deploy` in the background, once its worker runs: (process, foreground record)."""
    with log.open("ab") as sink:
        process = subprocess.Popen([str(REPO_ROOT / "run"), "server", "-w", str(ws), "--no-deploy"], env=env,
                                   stdout=sink, stderr=subprocess.STDOUT, cwd=REPO_ROOT)  # fmt: skip
    assert wait_for(lambda: foreground_running(ws) is not None or process.poll() is not None, 300), log.read_text()
    assert process.poll() is None, log.read_text()
    return process, foreground_running(ws)


def test_run_server_stops_its_worker_on_sigterm_and_server_stop_stops_both(tmp_path: Path) -> None:
    ws, env, log = tmp_path / "ws", cli_env(tmp_path), tmp_path / "run-server.log"
    try:
        process, foreground = start_run_server(ws, env, log)
        worker = int(foreground["worker_pid"])
        assert foreground["pid"] == process.pid and process_alive(worker)
        process.send_signal(signal.SIGTERM)
        gone = wait_for(lambda: process.poll() is not None and not group_members(worker), 10)
        assert gone, f"left after 10 s: ./run server {process.poll()}, worker group {group_members(worker)}"
        assert "SIGTERM: worker stopped" in log.read_text()
        assert foreground_running(ws) is None
        assert running_server(ws) is not None  # the workspace's server stays for CLI calls and the UI

        again, foreground = start_run_server(ws, env, log)
        stopped = subprocess.run([str(REPO_ROOT / "run"), "server", "stop", "-w", str(ws)], env=env,
                                 capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)  # fmt: skip
        assert stopped.returncode == 0, stopped.stderr
        assert f"stopped `./run server` (pid {again.pid})" in stopped.stdout
        assert again.wait(timeout=10) == 0
        assert not group_members(int(foreground["worker_pid"])) and running_server(ws) is None
        said = log.read_text().rsplit("odqa server: workspace", 1)[-1]  # what the second `./run server` said
        assert "SIGTERM from `./run server stop`: worker stopped" in said and "keeps running" not in said, said
    finally:
        reset_server(ws)


@pytest.fixture
def quick_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODQA_PREFECT_WATCH_S", "1")
    monkeypatch.setenv("ODQA_PREFECT_PORT", "0")


def test_a_background_server_stops_when_its_workspace_is_deleted(tmp_path: Path, quick_watchdog: None) -> None:
    ws = tmp_path / "ws"
    record = ensure_server(ws).record
    try:
        assert record.watchdog_pid and process_alive(record.watchdog_pid)
        shutil.rmtree(ws)
        assert wait_for(lambda: not is_prefect_server(record.pid), 1 + 30), "the server outlived its workspace"
        assert wait_for(lambda: not process_alive(record.watchdog_pid), 5)
    finally:
        if is_prefect_server(record.pid):
            os.kill(record.pid, signal.SIGKILL)
        if record.backend == "postgresql":
            with contextlib.suppress(PostgresUnavailable, RuntimeError):
                local_cluster().drop_database(database_name(ws))


def test_an_idle_background_server_stops_by_itself(tmp_path: Path, quick_watchdog: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("ODQA_PREFECT_IDLE_S", "8")
    ws = tmp_path / "ws"
    try:
        record = ensure_server(ws).record
        stopped = wait_for(lambda: not is_prefect_server(record.pid) and read_record(ws) is None, 8 + 2 + 30)
        assert stopped, "the idle server kept running"
    finally:
        reset_server(ws)


@pytest.fixture
def private_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A PostgreSQL cluster of this test's own ($ODQA_POSTGRES_DIR), stopped and deleted after."""
    try:
        local_cluster()
    except PostgresUnavailable as why:
        pytest.skip(f"no PostgreSQL here: {why}")
    parent = Path(tempfile.mkdtemp(prefix="odqa-pg-test-"))
    parent.chmod(0o755)  # as root, the cluster's owner (the postgres user) must reach it
    root = parent / "pg"
    monkeypatch.setenv("ODQA_POSTGRES_DIR", str(root))
    try:
        yield root
    finally:
        with contextlib.suppress(PostgresUnavailable, RuntimeError):
            local_cluster(root).stop()
        shutil.rmtree(parent, ignore_errors=True)


def test_a_killed_postmaster_is_restarted_by_the_next_verb(tmp_path: Path, private_cluster: Path) -> None:
    ws, env = tmp_path / "ws", {**cli_env(tmp_path), "ODQA_POSTGRES_DIR": str(private_cluster)}
    passages = tmp_path / "p.tsv"
    passages.write_text("id\ttext\ttitle\n1\tZorbania is landlocked; its river is the Quellor.\tZorbania\n",
                        encoding="utf-8")  # fmt: skip
    questions = tmp_path / "toy.qa.csv"
    questions.write_text('What is the river of Zorbania?\t["Quellor"]\n', encoding="utf-8")
    try:
        first = odqa(env, "-w", ws, "import", "passages", "--format", "dpr-tsv", passages)
        assert first.returncode == 0, first.stderr
        record = read_record(ws)
        assert (
            record is not None
            and record.backend == "postgresql"
            and record.cluster_root == str(private_cluster)
        )
        cluster = local_cluster(private_cluster)
        postmaster = cluster.server_pid()
        assert postmaster is not None
        assert cluster.workspaces()[record.database] == ws.resolve()
        status = odqa(env, "-w", ws, "server", "status")
        assert "up (postmaster pid" in status.stdout and "the server reads it" in status.stdout, status.stdout
        assert "auth string: off (any user of this machine can call the API" in status.stdout

        refused = subprocess.run([sys.executable, "-m", "odqa.flows.backend", "postgres", "stop"], env=env,
                                 capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)  # fmt: skip
        assert refused.returncode == 1 and f"workspace {ws.resolve()}" in refused.stderr and cluster.running()

        os.kill(postmaster, signal.SIGKILL)
        assert wait_for(lambda: not cluster.running(), 10)
        status = odqa(env, "-w", ws, "server", "status")
        assert "DOWN" in status.stdout, status.stdout

        second = odqa(env, "-w", ws, "import", "questions", "--format", "dpr-qas", "--dataset", "toy", "--split",
                      "dev", questions)  # fmt: skip
        assert second.returncode == 0, second.stderr
        assert "had stopped under this workspace's Prefect server; started it again" in second.stderr
        assert cluster.server_pid() not in (None, postmaster)
        status = odqa(env, "-w", ws, "server", "status")
        assert "up (postmaster pid" in status.stdout and "the server reads it" in status.stdout, status.stdout
    finally:
        reset_server(ws)


def test_a_killed_postmaster_left_unreaped_does_not_block_the_restart(private_cluster: Path) -> None:
    """Where the killed postmaster's parent never reaps it (a container whose init does not), its
    zombie keeps the pid in postmaster.pid alive for PostgreSQL; the restart must clear it."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0  # orphans become this process's children
    cluster = local_cluster(private_cluster)
    cluster.ensure_running()
    postmaster = cluster.server_pid()
    assert postmaster is not None
    restarted = None
    try:
        os.kill(postmaster, signal.SIGKILL)
        assert wait_for(lambda: Path(f"/proc/{postmaster}/stat").read_text().split(") ")[1][0] == "Z", 10)
        assert cluster.ensure_running() is True
        restarted = cluster.server_pid()
        assert restarted not in (None, postmaster)
        assert cluster.psql("SELECT 1") == "1"
    finally:
        with contextlib.suppress(PostgresUnavailable):
            cluster.stop()
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        for child in (postmaster, restarted):  # reap both: this process adopted them
            with contextlib.suppress(ChildProcessError, TypeError):
                os.waitpid(child, 0)
