"""The task runner data-parallel stages map their work over.

One machine: Prefect's thread pool (`threads`, the default) or a process pool (`processes`).
Several machines: a Dask cluster (prefect-dask's `DaskTaskRunner`) named by its scheduler
address, given as a flow parameter or in `$ODQA_DASK_ADDRESS`, e.g. `tcp://10.0.0.5:8786` after
`dask scheduler` on one machine and `dask worker tcp://10.0.0.5:8786` on each of the others.
The flows stay the same; only where their mapped tasks run changes, so a run on a cluster gives
the same output as a run on the default runner.

Capacity belongs to the workers: a worker started with `--resources GPU=1` declares one unit of
the accelerator (`ACCELERATOR`; on a CPU-only machine, one encoding at a time), and encoding
tasks then ask for one unit each (`accelerator_request`), so N such workers encode N shards at
once and no Prefect server's limit comes in between. Without such a worker, a worker thread is
the unit. Nothing is leased from a Prefect server, so several workspaces (each with its own
server) can share one cluster.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any, Literal, TypeVar

from prefect.futures import PrefectFuture
from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner
from pydantic import BaseModel, Field

from ...pipelines.dense.shard_plan import threads_per_task

DASK_ADDRESS_ENV = "ODQA_DASK_ADDRESS"
ACCELERATOR = "GPU"  # the Dask worker resource an encoding task asks one unit of
RunnerKind = Literal["threads", "processes", "dask"]
R = TypeVar("R")
_host_slots: dict[str, int] = {}  # per process: scheduler address -> task slots of its workers on this host


def dask_address(address: str | None = None) -> str | None:
    """The cluster address: the parameter, else `$ODQA_DASK_ADDRESS`, else none (local runner)."""
    return address or os.environ.get(DASK_ADDRESS_ENV) or None


def make_task_runner(
    kind: RunnerKind = "threads", workers: int | None = None, address: str | None = None
) -> TaskRunner:
    """A task runner for mapped data-parallel tasks.

    A Dask address always wins (the cluster decides how many workers run), also over a Dask
    client this process already holds (`flows.plumbing.dask_runner`); without one, `dask` starts a
    throw-away local cluster, `processes` a process pool, `threads` a thread pool.
    """
    address = dask_address(address)
    if address or kind == "dask":
        from .dask_runner import AddressedDaskTaskRunner

        if address:
            return AddressedDaskTaskRunner(address=address)
        return AddressedDaskTaskRunner(
            cluster_kwargs={"n_workers": workers or 2, "threads_per_worker": 1, "processes": False}
        )
    if kind == "processes":
        return ProcessPoolTaskRunner(max_workers=workers or os.cpu_count() or 1)
    if kind != "threads":
        raise ValueError(f"task runner must be threads, processes or dask, got {kind!r}")
    return ThreadPoolTaskRunner(max_workers=workers or os.cpu_count() or 1)


class RunnerSettings(BaseModel):
    """Where data-parallel stages run (a form in the Prefect UI of every flow that maps work)."""

    kind: RunnerKind = Field(default="threads", description="threads, processes or dask")
    workers: int | None = Field(default=None, ge=1, description="Workers of a local runner (default: CPU count)")
    dask_address: str | None = Field(
        default=None, description="Dask scheduler address, e.g. tcp://host:8786 (default: $ODQA_DASK_ADDRESS)"
    )
    bm25_batch: int = Field(default=64, ge=1, description="Questions per BM25 retrieval task")

    def describe(self) -> str:
        """Where the tasks run, for stage reports: `threads (2 workers)`, `dask tcp://host:8786`..."""
        address = dask_address(self.dask_address)
        if address:
            return f"dask {address}"
        workers = self.workers or (2 if self.kind == "dask" else os.cpu_count() or 1)
        return f"{'dask local cluster' if self.kind == 'dask' else self.kind} ({workers} workers)"

    def task_runner(self) -> TaskRunner:
        """The Prefect task runner these settings name."""
        return make_task_runner(self.kind, self.workers, self.dask_address)


def declared_accelerators(address: str) -> dict[str, float]:
    """Units of `ACCELERATOR` each worker of the cluster at ``address`` declares (workers
    without it left out)."""
    from distributed import Client

    with Client(address, timeout="10s") as client:
        workers = client.scheduler_info(n_workers=-1)["workers"]
    return {name: info["resources"][ACCELERATOR] for name, info in workers.items()
            if info.get("resources", {}).get(ACCELERATOR)}  # fmt: skip


def accelerator_needed(runner: RunnerSettings) -> str | None:
    """`ACCELERATOR` when the runner's cluster has workers declaring it (each encoding task then
    asks for one unit, and the workers' capacity decides how many run at once); else None."""
    address = dask_address(runner.dask_address)
    return ACCELERATOR if address and declared_accelerators(address) else None


def accelerator_request(needs: str | None) -> contextlib.AbstractContextManager[Any]:
    """Around mapping a stage's tasks: each asks for one unit of ``needs``, if given."""
    if needs:
        import dask

        return dask.annotate(resources={needs: 1})
    return contextlib.nullcontext()


def on_cluster(runner: RunnerSettings) -> bool:
    """Whether the runner's tasks run on a Dask cluster (whose workers hold the capacity) rather
    than on this machine (whose `gpu` slots do)."""
    return bool(dask_address(runner.dask_address)) or runner.kind == "dask"


def mapping_runner(runner: RunnerSettings | None) -> RunnerSettings | None:
    """The runner a stage maps its work over: the given one, else a Dask cluster when
    `$ODQA_DASK_ADDRESS` names one, else none (the stage keeps its own unmapped path)."""
    if runner is None and dask_address():
        return RunnerSettings(kind="dask")
    return runner


# --- threads of the tasks on one machine ----------------------------------------------------


def task_threads(runner: RunnerSettings) -> int | None:
    """Intra-op threads per task of a runner on this machine; None for a remote Dask cluster,
    whose workers work it out from the cluster (`_limit_threads`)."""
    if dask_address(runner.dask_address):
        return None
    cores = os.cpu_count() or 1
    concurrent = runner.workers or (2 if runner.kind == "dask" else cores)  # make_task_runner's defaults
    return threads_per_task(cores, concurrent)


def _dask_slots_on_this_host() -> int | None:
    """Threads of all Dask workers on this worker's host, or None outside a Dask worker."""
    try:
        from distributed import get_client, get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return None
    scheduler = worker.scheduler.address
    if scheduler not in _host_slots:
        workers = get_client().scheduler_info()["workers"]
        host = workers[worker.address]["host"] if worker.address in workers else worker.ip
        slots = sum(w["nthreads"] for w in workers.values() if w["host"] == host)
        _host_slots[scheduler] = slots or worker.state.nthreads
    return _host_slots[scheduler]


def usable_cores() -> int:
    """Cores this process may run on: a worker pinned with `taskset` to one core gets one
    thread, not one per core of the machine."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def limit_threads(threads: int | None) -> int:
    """Set this task's torch (and FAISS) intra-op threads; returns the number set."""
    import torch

    if threads is None:
        slots = _dask_slots_on_this_host()
        threads = threads_per_task(usable_cores(), slots) if slots else torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        import faiss

        faiss.omp_set_num_threads(threads)
    except ImportError:
        pass
    return threads


class RestoreTorchThreads:
    """Tasks on a local runner set torch's thread count of this process; put it back after."""

    def __enter__(self) -> None:
        import torch

        self.threads = torch.get_num_threads()

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.set_num_threads(self.threads)


# --- encoding -------------------------------------------------------------------------------


# --- waiting for mapped tasks -----------------------------------------------------------------

NO_WORKER_GRACE_S = 120.0  # how long a cluster run waits with no worker able to run its tasks
_POLL_S = 0.25
_FETCH_S = 10.0  # a done task's result not fetched in this time was lost with its worker since


class ClusterGone(RuntimeError):
    """No worker of the cluster could run the stage's remaining tasks for `NO_WORKER_GRACE_S`."""


def settled(futures: list[PrefectFuture[R]], needs: str | None = None,
            grace: float = NO_WORKER_GRACE_S) -> Iterator[tuple[PrefectFuture[R], R | None, Exception | None]]:  # fmt: skip
    """Each future with its result (or its error) as it finishes, in finishing order.

    It polls the futures rather than waiting for a done callback, and fetches a result with a
    bound, so a lost worker can never block it: a task whose worker died is run again by Dask
    (its future is pending again) and stays in the wait; a result lost between its completion and
    the fetch is waited for again. A taken Dask result is released on the cluster at once, so a
    worker lost later does not make Dask run a finished task again. On a cluster, when for
    ``grace`` seconds no worker (none declaring the ``needs`` resource, if given) is left, it
    raises `ClusterGone` rather than wait for workers that may never come."""
    pending = list(futures)
    watchdog = _Watchdog(needs, grace)
    while pending:
        done = [f for f in pending if _is_done(f)]
        if not done:
            watchdog.check(pending, len(futures))
            time.sleep(_POLL_S)
            continue
        for future in done:
            try:
                value = future.result(timeout=_FETCH_S)
            except TimeoutError:
                if not _is_done(future):
                    continue  # its result went with a lost worker: Dask computes it again
                raise
            except Exception as error:  # noqa: BLE001 (the caller decides what a failed task means)
                yield future, None, error
            else:
                yield future, value, None
            pending.remove(future)
            _release(future)


def _wrapped(future: PrefectFuture[Any]) -> Any:
    return getattr(future, "wrapped_future", None)


def _is_done(future: PrefectFuture[Any]) -> bool:
    wrapped = _wrapped(future)
    return wrapped.done() if wrapped is not None else future.state.is_final()


def _release(future: PrefectFuture[Any]) -> None:
    """Drop a taken result from the cluster (a no-op for a local runner's future)."""
    wrapped = _wrapped(future)
    if hasattr(wrapped, "release"):
        wrapped.release()


class _Watchdog:
    """Notices a cluster left without a worker that can run the pending tasks."""

    def __init__(self, needs: str | None, grace: float) -> None:
        self.needs, self.grace = needs, grace
        self.checked = self.since = time.monotonic()

    def check(self, pending: list[PrefectFuture[Any]], total: int) -> None:
        now = time.monotonic()
        client = getattr(_wrapped(pending[0]), "client", None)
        if client is None or now - self.checked < 2.0:
            return
        self.checked = now
        workers = client.scheduler_info(n_workers=-1)["workers"].values()
        if any(self.needs is None or w.get("resources", {}).get(self.needs) for w in workers):
            self.since = now
        elif now - self.since > self.grace:
            wanted = f" declaring {self.needs}" if self.needs else ""
            raise ClusterGone(f"no Dask worker{wanted} left at {client.scheduler.address} for {self.grace:.0f} s; "
                              f"{len(pending)} of {total} task(s) unfinished (start workers and run it again: "
                              "what finished is kept)")  # fmt: skip
