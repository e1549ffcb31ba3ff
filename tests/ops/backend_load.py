"""The load that froze SQLite, shared by the backend test and `benchmarks/bench_prefect_backend.py`:
a flow of 40 subflows whose tasks carry a tag with a concurrency limit, so task-run writes and
slot updates race the state-setting transactions."""

from __future__ import annotations

import asyncio

from prefect import flow, task

TAG = "odqa-backend-test"
STAGES = 40
TASKS_PER_STAGE = 3


@task(tags=[TAG])
async def tagged(stage: int, part: int) -> int:
    return stage * TASKS_PER_STAGE + part


@flow(name="backend-stage")
async def stage_flow(stage: int) -> int:
    return sum(await asyncio.gather(*(tagged(stage, part) for part in range(TASKS_PER_STAGE))))


@flow(name="backend-forty-stages")
async def forty_stages() -> int:
    """The 40 subflows run concurrently: the writes of their task runs, states and slots race."""
    return sum(await asyncio.gather(*(stage_flow(i) for i in range(STAGES))))


async def set_limit(slots: int) -> None:
    """The tag's concurrency limit on the current Prefect API."""
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        await client.create_concurrency_limit(tag=TAG, concurrency_limit=slots)
