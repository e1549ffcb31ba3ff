"""The watch folder as a real week runs it: prefect.yaml's `reindex` deployment, fired by its schedule
(here: once at the start, once more when the file is complete) and executed by a process worker, on a BM25-only workspace. A file still
being written is left for later by one scheduled run and taken whole by a later one, a link to a
file outside is refused by name, no run fails, and no byte behind the link reaches a log."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from odqa.flows.plumbing.server import REPO_ROOT, LocalPrefect, prefect_env, start_worker
from odqa.pipelines.retrieval.java import JavaMissingError, check_java
from odqa.storage import Workspace

SECRET = "SECRET-51c2-MARKER"
SETTLE_S = 2
#: How far ahead a scheduled run is put: the server's scheduler makes runs of a new schedule within
#: ~5 s and skips times already past.
AHEAD_S = 9
TIMEOUT_S = 420  # a run takes ~15 s on an idle machine; 2 cores under load stalled the worker's channel 3 min
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


def _weekly_and_once(spec: dict, delay_s: float) -> list:
    """prefect.yaml's schedules (weekly) plus one run `delay_s` from now: the schedule fires the runs
    one after the other, so none waits in the concurrency queue (whose retries back off to minutes)."""
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.schedules import CronSchedule, RRuleSchedule

    once = (datetime.now(UTC) + timedelta(seconds=delay_s)).strftime("%Y%m%dT%H%M%SZ")
    return [*(DeploymentScheduleCreate(schedule=CronSchedule(cron=c["cron"], timezone=c["timezone"]), active=True)
              for c in spec["schedules"]),
            DeploymentScheduleCreate(schedule=RRuleSchedule(rrule=f"DTSTART:{once}\nRRULE:FREQ=SECONDLY;COUNT=1"),
                                     active=True)]  # fmt: skip


def _reindex_spec() -> dict:
    deployments = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))["deployments"]
    return next(d for d in deployments if d["name"] == "reindex")


async def _deploy(spec: dict, pool: str, name: str):
    """prefect.yaml's `reindex` deployment (entrypoint, parameters, tags, concurrency limit, schedule)
    under `name` on `pool`, BM25 only and a short settle time, with one more scheduled run soon:
    created in process, as `prefect deploy` would (its CLI costs ~40 s on a busy machine), with the
    pull step it adds: without one, each run would copy the whole checkout (.venv included, ~3 GB)
    into the worker's temporary folder before starting."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.client.schemas.objects import ConcurrencyOptions

    limit = spec["concurrency_limit"]
    async with get_client() as client:
        await client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        flow_id = await client.create_flow_from_name("reindex")
        return await client.create_deployment(
            flow_id=flow_id, name=name, entrypoint=spec["entrypoint"], work_pool_name=pool, tags=spec["tags"],
            parameters={**spec["parameters"], "dense": False, "settle_seconds": SETTLE_S},
            schedules=_weekly_and_once(spec, AHEAD_S), concurrency_limit=limit["limit"],
            concurrency_options=ConcurrencyOptions(collision_strategy=limit["collision_strategy"]), path=str(REPO_ROOT),
            pull_steps=[{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO_ROOT)}}])


async def _schedule_once_more(spec: dict, deployment_id) -> None:
    """The deployment's schedule, set again with one more run AHEAD_S (> SETTLE_S) from now."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import DeploymentScheduleUpdate, DeploymentUpdate

    schedules = [DeploymentScheduleUpdate(schedule=s.schedule, active=True)
                 for s in _weekly_and_once(spec, AHEAD_S)]  # fmt: skip
    async with get_client() as client:
        await client.update_deployment(deployment_id, DeploymentUpdate(schedules=schedules))


async def _remove(deployment_id, pool: str) -> None:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        await client.delete_deployment(deployment_id)
        await client.delete_work_pool(pool)


def _finished(deployment_id, count: int, worker_log: Path) -> list:
    """The deployment's runs once `count` of them are final; fails on a failed one."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        finished = [run for run in asyncio.run(_runs(deployment_id)) if run.state is not None and run.state.is_final()]
        failed = [run for run in finished if not run.state.is_completed()]
        assert not failed, ([(r.name, r.state) for r in failed], worker_log.read_text(errors="replace")[-4000:])
        if len(finished) >= count:
            return finished
        time.sleep(0.5)
    raise AssertionError(f"fewer than {count} scheduled runs finished in {TIMEOUT_S} s: "
                         f"{worker_log.read_text(errors='replace')[-4000:]}")  # fmt: skip


def _until_logged(deployment_id, count: int, pattern: str, worker_log: Path) -> tuple[list, list[str]]:
    """The finished runs (at least `count`) and their logs, once one of them logged `pattern` (a run's
    last lines reach the server in a batch after its state turned Completed)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        finished = _finished(deployment_id, count, worker_log)
        logs = [asyncio.run(_logs(run.id)) for run in finished]
        if any(pattern in text for text in logs) or time.monotonic() > deadline:
            return finished, logs
        time.sleep(1)


@pytest.mark.e2e
@pytest.mark.timeout(960)  # two waits of TIMEOUT_S, with the set-up
def test_scheduled_runs_take_a_file_once_complete_and_refuse_a_link(prefect_harness: str, tmp_path: Path) -> None:
    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"BM25 needs a JDK: {error}")
    ws = Workspace.resolve(tmp_path / "ws").root  # `odqa init`, or an earlier verb, made it a workspace
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
    spec = _reindex_spec()
    deployment = asyncio.run(_deploy(spec, pool, f"reindex-{pool}"))
    running = LocalPrefect(prefect_harness, env, start_worker(env, pool, worker_log))
    try:
        first = _finished(deployment, 1, worker_log)
        growing.write_text(whole, encoding="utf-8")  # the writer finishes
        writing.clear()
        writer.join()
        asyncio.run(_schedule_once_more(spec, deployment))
        finished, logs = _until_logged(deployment, len(first) + 1, "added growing.tsv", worker_log)
    finally:
        writing.clear()
        running.stop_worker()
        asyncio.run(_remove(deployment, pool))
    assert "within the settle time of 2 s" in logs[0] and "left for later: growing.tsv" in logs[0], logs[0]
    assert "refused: link.tsv (a symbolic link" in logs[0] and "added first.tsv" in logs[0], logs[0]
    assert any("added growing.tsv" in text for text in logs[1:]), logs
    assert all(run.auto_scheduled for run in finished), [(r.name, r.auto_scheduled) for r in finished]
    rows = Workspace.resolve(ws).sql("SELECT passage_id, title FROM passages ORDER BY 1").to_pylist()
    assert rows == [{"passage_id": i, "title": h} for i, _, h in sorted(FIRST + GROWING)], rows
    everything = "\n".join(logs) + worker_log.read_text(errors="replace")
    assert SECRET not in everything and str(secret) not in everything
