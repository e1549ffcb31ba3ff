"""Tag concurrency slots: a task waiting for one says so in its run's logs (what it waits for,
who holds the slots, how long it waited), and the `gpu` slot count fits the machine."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from prefect import flow, task

from flows.concurrency_slots import CORES_PER_CPU_SLOT, SLOTS_ENV, announce_slot_waits, gpu_slots

TAG = "odqa-slot-test"
HOLD_S = 6.0


@task(tags=[TAG])
def hold(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@flow(name="two-holders-one-slot")
def two_holders() -> float:
    first, second = hold.submit(HOLD_S), hold.submit(HOLD_S)
    return first.result() + second.result()


async def _limit(slots: int) -> None:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        await client.create_concurrency_limit(tag=TAG, concurrency_limit=slots)


async def _log_lines(flow_run_id) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    async with get_client() as client:
        logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])),
                                      limit=200, offset=0, sort=LogSort.TIMESTAMP_ASC)  # fmt: skip
        return [log.message for log in logs]


def test_a_task_waiting_for_a_slot_says_what_it_waits_for(prefect_harness: str) -> None:
    from prefect.logging.handlers import APILogWorker

    announce_slot_waits()
    asyncio.run(_limit(1))
    state = two_holders(return_state=True)
    assert state.is_completed() and state.result() == 2 * HOLD_S
    APILogWorker.drain_all()
    lines = asyncio.run(_log_lines(state.state_details.flow_run_id))
    waiting = [line for line in lines if line.startswith("waiting ")]
    assert waiting, lines
    assert f"for a free slot of the tag concurrency limit '{TAG}' (1 of 1 taken by task run 'hold-" in waiting[0]
    assert "of flow run '" in waiting[0] and "the task starts when one frees" in waiting[0]
    assert any(line.startswith(f"got a slot of {TAG} after ") for line in lines), lines


def test_gpu_slots_fit_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLOTS_ENV, "3")
    assert gpu_slots() == (3, f"${SLOTS_ENV}")
    monkeypatch.delenv(SLOTS_ENV)
    import torch

    slots, why = gpu_slots()
    if torch.cuda.device_count():
        assert slots == torch.cuda.device_count() and "per GPU" in why
    else:
        assert slots == max(1, (os.cpu_count() or 1) // CORES_PER_CPU_SLOT) and why.startswith("CPU only")
