"""The workspace's long-lived Prefect server as CLI verbs meet it: the first verb that runs a flow
starts it in the background; SIGKILLed between two verbs, it is noticed and started again by the
second verb, which succeeds; a flow run left active by a process that died with it is marked
Crashed; and the workspace is unchanged apart from what the second verb wrote. A call killed
while the server lives on has its runs marked Crashed by the next verb, and a call still alive
keeps its own. The server is stopped and its database dropped at the end (`reset_server`)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from odqa.flows.backend.local_server import is_prefect_server, read_record, reset_server
from tests.ops.cli_process import REPO_ROOT, cli_env, odqa
from tests.ops.input_files import PASSAGES, write_passages, write_questions

SLEEPER = """
import time
from prefect import flow, task
from prefect.runtime import flow_run

@task
def nap() -> None:
    time.sleep(600)

@flow(name="sleeper")
def sleeper() -> None:
    print(flow_run.get_id(), flush=True)
    nap()

sleeper()
"""
# What `odqa import questions` may change in a workspace: its table and the metrics rows it
# records about the import, the snapshot that commits them, the catalog's views, the log, and
# the Prefect server's state and log.
# (locks/: the import's writer lock file, which names its last holder)
SECOND_VERB_WRITES = ("tables/questions/", "tables/metrics/", "snapshot.json", "snapshots/", "catalog.duckdb",
                      "logs/", "prefect/", "prefect-logs/", "locks/")  # fmt: skip


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while is_prefect_server(pid) and time.monotonic() < deadline:
        time.sleep(0.1)


async def _state_of(api_url: str, flow_run_id: str) -> tuple[str, list[str]]:
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId
    from prefect.client.schemas.sorting import TaskRunSort

    async with PrefectClient(api_url) as client:
        run = await client.read_flow_run(flow_run_id)
        tasks = await client.read_task_runs(task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(
            any_=[run.id])), sort=TaskRunSort.EXPECTED_START_TIME_DESC, limit=10, offset=0)  # fmt: skip
        return run.state_name, [t.state_name for t in tasks]


def test_a_killed_server_is_restarted_by_the_next_verb_and_nothing_is_lost(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    env = cli_env(tmp_path)
    try:
        first = odqa(env, "-w", ws, "import", "passages", "--format", "dpr-tsv",
                     write_passages(tmp_path / "p.tsv", PASSAGES))  # fmt: skip
        assert first.returncode == 0, first.stderr
        assert "started this workspace's Prefect server in the background" in first.stderr
        killed = read_record(ws)
        assert killed is not None and is_prefect_server(killed.pid)

        # A flow run on that server whose process dies too, while the run is active.
        sleeper = subprocess.Popen([sys.executable, "-c", SLEEPER], env={**env, "PREFECT_API_URL": killed.api_url},
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT)  # fmt: skip
        flow_run_id = sleeper.stdout.readline().strip()
        time.sleep(2)  # the task is running
        sleeper.kill()
        sleeper.wait()
        kill(killed.pid)
        before = files(ws)

        second = odqa(env, "-w", ws, "import", "questions", "--format", "dpr-qas", "--dataset", "toy", "--split",
                      "dev", write_questions(tmp_path / "toy.qa.csv"))  # fmt: skip
        assert second.returncode == 0, second.stderr
        assert f"this workspace's Prefect server (pid {killed.pid}) had stopped; started it again" in second.stderr
        assert "marked 1 flow run(s) whose process is gone as Crashed" in second.stderr
        restarted = read_record(ws)
        assert restarted is not None and restarted.pid != killed.pid and is_prefect_server(restarted.pid)
        assert restarted.port == killed.port and restarted.database == killed.database

        after = files(ws)
        changed = {path for path in after if before.get(path) != after[path]} | (set(before) - set(after))
        assert changed and all(path.startswith(SECOND_VERB_WRITES) for path in changed), sorted(changed)
        assert any(path.startswith("tables/questions/") for path in changed)
        assert all(after.get(path) == digest for path, digest in before.items() if path.startswith("tables/"))
        from odqa.storage import Workspace

        workspace = Workspace.resolve(ws)
        assert workspace.rows("passages") == len(PASSAGES) and workspace.rows("questions") == 3
        assert asyncio.run(_state_of(restarted.api_url, flow_run_id)) == ("Crashed", ["Crashed"])
    finally:
        reset_server(ws)
    assert read_record(ws) is None


async def _runs_of(api_url: str, pids: list[int]) -> dict[int, tuple[str, str, list[str]]]:
    """pid -> (flow run id, its state, its task runs' states) of the flow runs stamped with a pid."""
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId
    from prefect.client.schemas.sorting import FlowRunSort, TaskRunSort

    stamps = {f"{socket.gethostname()}:{pid}": pid for pid in pids}
    found: dict[int, tuple[str, str, list[str]]] = {}
    async with PrefectClient(api_url) as client:
        for run in await client.read_flow_runs(sort=FlowRunSort.ID_DESC, limit=50, offset=0):
            if run.infrastructure_pid in stamps:
                tasks = await client.read_task_runs(task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(
                    any_=[run.id])), sort=TaskRunSort.EXPECTED_START_TIME_DESC, limit=10, offset=0)  # fmt: skip
                found[stamps[run.infrastructure_pid]] = (str(run.id), run.state_name, [t.state_name for t in tasks])
    return found


def test_a_killed_calls_runs_end_crashed_by_the_next_verb_while_a_live_calls_keep_running(tmp_path: Path) -> None:
    """Two `odqa questions trex` calls wait inside their flow runs, each reading a FIFO of triples
    nobody writes; one is SIGKILLed. The next verb (on the same, still running server) sets the
    killed call's run Crashed and leaves the live call's run Running."""
    ws = tmp_path / "ws"
    env = cli_env(tmp_path)
    code = "import sys; from odqa.flows.cli import main; sys.exit(main())"
    templates = REPO_ROOT / "sample" / "wikidata" / "relation_query_templates.json"
    calls: list[subprocess.Popen] = []
    try:
        for name in ("killed", "live"):
            fifo = tmp_path / f"{name}.jsonl"
            os.mkfifo(fifo)
            calls.append(subprocess.Popen([sys.executable, "-c", code, "-w", str(ws), "questions", "trex", "--triples",
                                           str(fifo), "--templates", str(templates), "--dataset", name], env=env,
                                          cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                                          stderr=(tmp_path / f"{name}.err").open("w")))  # fmt: skip
        killed, live = calls
        deadline = time.monotonic() + 300
        runs: dict[int, tuple[str, str, list[str]]] = {}
        while time.monotonic() < deadline:
            record = read_record(ws)
            if record is not None:
                runs = asyncio.run(_runs_of(record.api_url, [killed.pid, live.pid]))
                if [state for _, state, _ in runs.values()] == ["Running", "Running"]:
                    break
            assert killed.poll() is None and live.poll() is None, [p.read_text() for p in tmp_path.glob("*.err")]
            time.sleep(0.5)
        else:
            raise AssertionError(f"the two calls' flow runs did not both run: {runs}")
        killed.kill()
        killed.wait()

        after = odqa(env, "-w", ws, "import", "questions", "--format", "dpr-qas", "--dataset", "toy", "--split",
                     "dev", write_questions(tmp_path / "toy.qa.csv"))  # fmt: skip
        assert after.returncode == 0, after.stderr
        assert "started this workspace's Prefect server" not in after.stderr  # the same server, still running
        assert "marked 1 flow run(s) whose process is gone as Crashed" in after.stderr, after.stderr
        states = asyncio.run(_runs_of(record.api_url, [killed.pid, live.pid]))
        assert states[killed.pid][0] == runs[killed.pid][0] and states[killed.pid][1] == "Crashed"
        assert all(state == "Crashed" for state in states[killed.pid][2])
        assert states[live.pid][1] == "Running" and live.poll() is None
    finally:
        for call in calls:
            call.kill()
            call.wait()
        reset_server(ws)
