"""The release rules as a real week runs them: the `reindex` deployment of prefect.yaml, deployed as
`./run server` deploys it but on a schedule of a few seconds, fired by the Prefect server's scheduler
(its recent-deployments loop schedules a new deployment within ~5 s) and executed by a process worker, on a workspace
that serves BM25 and has no model. The scheduled run completes and publishes BM25 with the
passages that landed in incoming/ (the fault: every run failed with "no production model" after
it had ingested them), and the schedule goes on making runs. (One run is executed: a flow run's
process takes 15-60 s to import torch and Prefect on a busy machine.)"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from odqa.flows.plumbing.server import LocalPrefect, prefect, prefect_env, start_worker
from odqa.storage.releases import current_release
from tests.boundaries.release_builds import NEW_PASSAGES, copy_workspace, passage_ids, passages_file

POOL = "odqa-reindex-schedule-test"  # its own pool: no other test's worker runs these runs
INTERVAL_S = 10  # a run takes longer: the next ones wait (the deployment's concurrency limit is 1)
TIMEOUT_S = 300


async def _runs(deployment_id) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.sorting import FlowRunSort

    async with get_client() as client:
        return await client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                                           sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=50, offset=0)  # fmt: skip


async def _deployment_id(name: str):
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        return (await client.read_deployment_by_name(name)).id


async def _delete_deployment(name: str) -> None:
    """Delete `name` where an earlier test on this session's server deployed it (the browser test
    quick-runs `reindex`): `prefect deploy` would update it, and its runs would count as ours."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    async with get_client() as client:
        try:
            deployment = await client.read_deployment_by_name(name)
        except ObjectNotFound:
            return
        await client.delete_deployment(deployment.id)


async def _create_pool() -> None:
    """The process work pool, as `prefect work-pool create --type process` makes it (in process: no CLI start)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.workers.process import ProcessWorker

    async with get_client() as client:
        await client.create_work_pool(WorkPoolCreate(name=POOL, type="process",
                                                     base_job_template=ProcessWorker.get_default_base_job_template()),
                                      overwrite=True)  # fmt: skip


async def _forget(deployment_id) -> None:
    """Delete the deployment (its scheduled runs go with it) and the pool."""
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        await client.delete_deployment(deployment_id)
        await client.delete_work_pool(POOL)


def _first_finished(deployment_id, worker_log: Path) -> tuple[object, list]:
    """(the deployment's first final run, all its runs then); fails when that run did not complete."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        runs = asyncio.run(_runs(deployment_id))
        final = [run for run in runs if run.state is not None and run.state.is_final()]
        if final:
            assert final[0].state.is_completed(), (final[0].name, final[0].state,
                                                   worker_log.read_text(errors="replace")[-5000:])  # fmt: skip
            return final[0], runs
        time.sleep(1)
    raise AssertionError(f"no scheduled run finished in {TIMEOUT_S} s:\n{worker_log.read_text(errors='replace')[-5000:]}")


@pytest.mark.e2e
@pytest.mark.timeout(420)
def test_scheduled_reindex_runs_rebuild_bm25_without_a_model(prefect_harness: str, bm25_served: Path,
                                                            tmp_path: Path) -> None:  # fmt: skip
    ws = copy_workspace(bm25_served, tmp_path / "ws")
    served = current_release(ws)
    landed = Path(passages_file(ws.root / "incoming", "new.tsv", NEW_PASSAGES))
    settled = time.time() - 600  # written and closed long ago: complete by any watch rule
    os.utime(landed, (settled, settled))
    env = prefect_env(prefect_harness, ws.root) | {"PREFECT_WORKER_QUERY_SECONDS": "1", "ODQA_PROGRESS": "log"}
    asyncio.run(_create_pool())
    asyncio.run(_delete_deployment("reindex/reindex"))
    worker_log = tmp_path / "worker.log"
    worker = LocalPrefect(prefect_harness, env, start_worker(env, POOL, worker_log))  # it starts while we deploy
    deployment_id = None
    try:
        prefect(["--no-prompt", "deploy", "--name", "reindex", "--pool", POOL, "--interval", str(INTERVAL_S)], env)
        deployment_id = asyncio.run(_deployment_id("reindex/reindex"))
        run, runs = _first_finished(deployment_id, worker_log)
    finally:
        worker.stop_worker()
        if deployment_id is not None:
            asyncio.run(_forget(deployment_id))
    assert run.auto_scheduled  # made by the server's scheduler from the deployment's schedule, not by us
    assert sum(other.auto_scheduled for other in runs) >= 2  # and the schedule goes on
    release = current_release(ws)
    assert release.release != served.release and release.bm25 and release.dense == []
    assert ws.rows("passages") == 6 and "6" in passage_ids(ws)
    assert release.passages_version != served.passages_version and release.figures["bm25_documents"] == 6
