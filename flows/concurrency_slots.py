"""The `gpu` tag concurrency limit: how many slots fit this machine, and a line in the run's logs
while a task waits for one.

Training and encoding tasks carry the tag `gpu`; a Prefect tag concurrency limit on it makes GPU
tasks of different flow runs queue instead of sharing a device. Prefect 3.8's task engine waits
for a slot silently (the task sits in Pending, its logs empty), so a user cannot tell a queued
task from a hung one. `announce_slot_waits` wraps the engine's slot acquisition: after
`GRACE_S` without a slot the task's run logs say what it waits for and who holds the slots, as a
warning (so the terminal of a CLI call shows it too), again every `REPEAT_S`, and how long it
waited once it got one.
`flows.runtime` installs it in every process that runs odqa flows.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

GPU_TAG = "gpu"
SLOTS_ENV = "ODQA_GPU_SLOTS"
CORES_PER_CPU_SLOT = 4
GRACE_S = 3.0
REPEAT_S = 60.0
HOLDERS_SHOWN = 3


def gpu_slots() -> tuple[int, str]:
    """(concurrent `gpu`-tagged tasks this machine takes, why): ``$ODQA_GPU_SLOTS``, else one per
    GPU, else on a CPU-only machine one per 4 cores (at least one): a CPU training or encoding
    already uses every core, so more of them at once only share the cores and add memory."""
    if os.environ.get(SLOTS_ENV):
        return max(1, int(os.environ[SLOTS_ENV])), f"${SLOTS_ENV}"
    try:
        import torch

        devices = torch.cuda.device_count()
    except ImportError:
        devices = 0
    if devices:
        return devices, f"one per GPU, {devices} GPU(s)"
    cores = os.cpu_count() or 1
    return max(1, cores // CORES_PER_CPU_SLOT), f"CPU only: one per {CORES_PER_CPU_SLOT} cores, {cores} cores"


def set_gpu_limit(api_url: str, auth_string: str | None = None) -> tuple[int, str]:
    """Create or update the `gpu` tag limit on the server at ``api_url`` to `gpu_slots`
    (``auth_string``: the server's, when it requires one; see flows.backend.auth)."""
    import asyncio

    from flows.backend.auth import api_client

    slots, why = gpu_slots()

    async def apply() -> None:
        async with api_client(api_url, auth_string) as client:
            await client.create_concurrency_limit(tag=GPU_TAG, concurrency_limit=slots)

    asyncio.run(apply())
    return slots, why


def describe_wait(tags: list[str], waited: float) -> str:
    """What a task waiting ``waited`` seconds for slots of ``tags`` waits for, read from the server."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    parts = []
    with get_client(sync_client=True) as client:
        for tag in tags:
            try:
                limit = client.read_concurrency_limit_by_tag(tag)
            except ObjectNotFound:
                continue
            holders = []
            for task_run_id in limit.active_slots[:HOLDERS_SHOWN]:
                with contextlib.suppress(Exception):
                    task_run = client.read_task_run(task_run_id)
                    flow_run = client.read_flow_run(task_run.flow_run_id) if task_run.flow_run_id else None
                    holders.append(f"task run '{task_run.name}'" + (f" of flow run '{flow_run.name}'" if flow_run else ""))
            taken = f"{len(limit.active_slots)} of {limit.concurrency_limit} taken"
            parts.append(f"'{tag}' ({taken}{' by ' + ', '.join(holders) if holders else ''})")
    what = "; ".join(parts) or ", ".join(f"'{t}'" for t in tags)
    return (f"waiting {waited:.0f} s for a free slot of the tag concurrency limit {what}; the task starts "
            f"when one frees (see `prefect concurrency-limit inspect TAG`)")  # fmt: skip


class SlotWait:
    """While the block runs (the engine acquiring slots), a watcher thread logs what the task
    waits for after GRACE_S and then every REPEAT_S; on leaving after such a line, one more says
    how long the wait took."""

    def __init__(self, tags: list[str], logger: logging.Logger | logging.LoggerAdapter) -> None:
        self.tags = tags
        self.logger = logger
        self.done = threading.Event()
        self.announced = False
        self.started = time.monotonic()

    def __enter__(self) -> SlotWait:
        context = contextvars.copy_context()  # the task's Prefect settings and run context
        threading.Thread(target=context.run, args=(self._watch,), daemon=True, name="odqa-slot-wait").start()
        return self

    def _watch(self) -> None:
        pause = GRACE_S
        while not self.done.wait(pause):
            try:
                message = describe_wait(self.tags, time.monotonic() - self.started)
            except Exception as error:  # noqa: BLE001 (a report must never break the task)
                message = f"waiting for a slot of {self.tags} ({error})"
            if self.done.is_set():
                return
            self.logger.warning(message)
            self.announced = True
            pause = REPEAT_S

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        self.done.set()
        if self.announced and kind is None:
            self.logger.info(f"got a slot of {', '.join(self.tags)} after {time.monotonic() - self.started:.0f} s")


def _run_logger() -> logging.Logger | logging.LoggerAdapter:
    """The task run's logger (the engine acquires slots inside the task's run context)."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("odqa.slots")


def _tags(names: str | list[str]) -> list[str]:
    return [n.removeprefix("tag:") for n in ([names] if isinstance(names, str) else list(names))]


def _announcing(acquire: Callable[..., Any]) -> Callable[..., Any]:
    @contextlib.contextmanager
    def concurrency(names: str | list[str], *args: Any, **kwargs: Any) -> Iterator[None]:
        tags = _tags(names)
        with contextlib.ExitStack() as stack:
            if tags:
                with SlotWait(tags, _run_logger()):
                    stack.enter_context(acquire(names, *args, **kwargs))
            else:
                stack.enter_context(acquire(names, *args, **kwargs))
            yield

    concurrency.odqa_announces = True  # type: ignore[attr-defined]
    return concurrency


def _announcing_async(acquire: Callable[..., Any]) -> Callable[..., Any]:
    @contextlib.asynccontextmanager
    async def concurrency(names: str | list[str], *args: Any, **kwargs: Any) -> AsyncIterator[None]:
        tags = _tags(names)
        async with contextlib.AsyncExitStack() as stack:
            if tags:
                with SlotWait(tags, _run_logger()):
                    await stack.enter_async_context(acquire(names, *args, **kwargs))
            else:
                await stack.enter_async_context(acquire(names, *args, **kwargs))
            yield

    concurrency.odqa_announces = True  # type: ignore[attr-defined]
    return concurrency


def announce_slot_waits() -> None:
    """Wrap the task engine's slot acquisition (sync and async tasks) with `SlotWait`, once per
    process. The engine calls these two names for every task with tags, in the task's run context."""
    import prefect.task_engine as engine

    if getattr(engine._concurrency, "odqa_announces", False):
        return
    engine._concurrency = _announcing(engine._concurrency)
    engine._aconcurrency = _announcing_async(engine._aconcurrency)
