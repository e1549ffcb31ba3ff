"""The watch folder as a real week runs it: prefect.yaml's `reindex` deployment, fired by its schedule
(here every few seconds) and executed by a process worker, on a BM25-only workspace. A file still
being written is left for later by one scheduled run and taken whole by a later one, a link to a
file outside is refused by name, no run fails, and no byte behind the link reaches a log."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from odqa.flows.plumbing.server import LocalPrefect, prefect, prefect_env, start_worker
from odqa.pipelines.retrieval.java import JavaMissingError, check_java
from odqa.storage import Workspace

SECRET = "SECRET-51c2-MARKER"
INTERVAL_S = 6  # the schedule fires this often; the deployment's concurrency limit queues the runs
SETTLE_S = 2
TIMEOUT_S = 240  # a run takes ~15 s on an idle machine; a busy CI machine gets this long
FIRST = [("f1", "The Quellor river floods every spring.", "Quellor"), ("f2", "Morvil is a port.", "Morvil")]
GROWING = [("g1", "The Eiffel Tower is in Paris.", "Eiffel Tower"), ("g2", "It is 330 metres tall.", "Eiffel Tower")]


def _rows(rows: list[tuple[str, str, str]]) -> str:
    return "id\ttext\ttitle\n" + "".join(f"{i}\t{t}\t{h}\n" for i, t, h in rows)


async def _runs(deployment_id) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.sorting import FlowRunSort

    async with get_client() as client:
        return await client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                                           sort=FlowRunSort.START_TIME_ASC, limit=200, offset=0)  # fmt: skip


async def _logs(flow_run_id) -> str:
    from prefect.client.orchestration import get_client

    messages: list[str] = []
    async with get_client() as client:
        while True:  # the server answers at most 200 lines a call
            response = await client._client.post("/logs/filter", json={
                "logs": {"flow_run_id": {"any_": [str(flow_run_id)]}}, "limit": 200, "offset": len(messages),
                "sort": "TIMESTAMP_ASC"})  # fmt: skip
            response.raise_for_status()
            page = [entry["message"] for entry in response.json()]
            messages += page
            if len(page) < 200:
                return "\n".join(messages)


async def _remove(deployment_id, pool: str) -> None:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        await client.delete_deployment(deployment_id)
        await client.delete_work_pool(pool)


def _finished_logs(deployment_id, pattern: str, worker_log: Path) -> tuple[list, str]:
    """The deployment's runs once a finished one logged `pattern` (the runs' logs arrive in batches,
    after their state), and the logs of every finished run; fails on a failed run."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        runs = asyncio.run(_runs(deployment_id))
        finished = [run for run in runs if run.state is not None and run.state.is_final()]
        failed = [run for run in finished if not run.state.is_completed()]
        assert not failed, ([(r.name, r.state) for r in failed], worker_log.read_text(errors="replace")[-4000:])
        logs = "\n".join(asyncio.run(_logs(run.id)) for run in finished)
        if pattern in logs:
            return finished, logs
        time.sleep(1)
    raise AssertionError(f"no scheduled run logged {pattern!r} in {TIMEOUT_S} s: "
                         f"{worker_log.read_text(errors='replace')[-4000:]}")  # fmt: skip


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_scheduled_runs_take_a_file_once_complete_and_refuse_a_link(prefect_harness: str, tmp_path: Path) -> None:
    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"BM25 needs a JDK: {error}")
    ws = tmp_path / "ws"
    incoming = ws / "incoming"
    incoming.mkdir(parents=True)
    secret = tmp_path / "outside" / "secret.tsv"
    secret.parent.mkdir()
    secret.write_text(_rows([("s1", f"{SECRET} the password", "Secrets")]), encoding="utf-8")
    (incoming / "first.tsv").write_text(_rows(FIRST), encoding="utf-8")
    os.utime(incoming / "first.tsv", (time.time() - 3600,) * 2)  # landed an hour ago
    (incoming / "link.tsv").symlink_to(secret)
    growing = incoming / "growing.tsv"
    whole = _rows(GROWING)
    growing.write_text(whole[: whole.index("Eiffel To") + len("Eiffel To")], encoding="utf-8")  # cut mid-title
    writing = threading.Event()
    writing.set()

    def keep_writing() -> None:  # a slow writer: the file keeps changing until it is complete
        while writing.is_set():
            os.utime(growing)
            time.sleep(0.3)

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()

    pool = f"odqa-watch-{uuid.uuid4().hex[:8]}"  # a pool of its own: no other test's worker takes these runs
    env = prefect_env(prefect_harness, ws) | {"PREFECT_WORKER_QUERY_SECONDS": "1"}
    worker_log = tmp_path / "worker.log"
    prefect(["work-pool", "create", pool, "--type", "process"], env)
    prefect(["--no-prompt", "deploy", "--name", "reindex", "--pool", pool, "--interval", str(INTERVAL_S),
             "--params", json.dumps({"dense": False, "settle_seconds": SETTLE_S})], env)  # fmt: skip
    from prefect.client.orchestration import get_client

    async def deployment_id():
        async with get_client() as client:
            return (await client.read_deployment_by_name("reindex/reindex")).id

    deployment = asyncio.run(deployment_id())
    running = LocalPrefect(prefect_harness, env, start_worker(env, pool, worker_log))
    try:
        _, logs = _finished_logs(deployment, "added first.tsv", worker_log)
        assert "left for later: growing.tsv (changed 0 s ago, within the settle time of 2 s" in logs, logs
        assert "refused: link.tsv (a symbolic link" in logs and "added first.tsv" in logs, logs
        growing.write_text(whole, encoding="utf-8")  # the writer finishes
        writing.clear()
        writer.join()
        finished, logs = _finished_logs(deployment, "added growing.tsv", worker_log)
    finally:
        writing.clear()
        running.stop_worker()
        asyncio.run(_remove(deployment, pool))
    assert all(run.auto_scheduled for run in finished), [(r.name, r.auto_scheduled) for r in finished]
    rows = Workspace.resolve(ws).sql("SELECT passage_id, title FROM passages ORDER BY 1").to_pylist()
    assert rows == [{"passage_id": i, "title": h} for i, _, h in sorted(FIRST + GROWING)], rows
    assert SECRET not in logs + worker_log.read_text(errors="replace") and str(secret) not in logs
