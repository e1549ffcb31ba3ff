"""A real Dask cluster on 127.0.0.1 for tests and benchmarks: `dask scheduler` and N
`dask worker --no-nanny` subprocesses (a SIGKILLed worker stays dead, as on a user's machine),
each declaring one unit of the accelerator resource; and `odqa` commands run against it in
their own processes, so that a hang fails within a bound with what each process said."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from odqa.flows.plumbing.task_runners import ACCELERATOR

REPO_ROOT = Path(__file__).resolve().parents[2]
DASK = (
    [sys.executable, "-m", "distributed.cli.dask_scheduler"],
    [sys.executable, "-m", "distributed.cli.dask_worker"],
)
STALL_S = 180.0  # no process wrote anything for this long: a hang, whatever the load
LIMIT_S = 480.0  # below pytest's timeout of 600 s
ODQA = [sys.executable, "-c", "import sys; from odqa.flows.cli import main; sys.exit(main())"]


@dataclass
class RealCluster:
    """The scheduler's address, the worker processes and where every process writes its output."""

    address: str
    logs: Path
    info: Path  # the scheduler file
    env: dict[str, str]
    cores: Sequence[int] | None = None
    workers: list[subprocess.Popen] = field(default_factory=list)

    def start_worker(self, i: int) -> subprocess.Popen:
        """Worker i (one thread, one unit of `ACCELERATOR`, pinned to cores[i] if given). It imports
        the encoding flow's modules (torch...) as it starts, before it joins: a first shard
        task does not spend minutes importing, silent, on a loaded machine."""
        pin = ["taskset", "-c", str(self.cores[i])] if self.cores else []
        return _start([*pin, *DASK[1], "--scheduler-file", str(self.info), "--no-nanny", "--nthreads", "1",
                       "--resources", f"{ACCELERATOR}=1", "--no-dashboard", "--death-timeout", "60",
                       "--preload", "odqa.flows.stages.encode"],
                      self.env, self.logs / f"worker-{i}-{len(list(self.logs.glob(f'worker-{i}-*')))}.log")  # fmt: skip

    def revive(self) -> None:
        """A new worker in place of each dead one; returns once all are connected."""
        from distributed import Client

        self.workers = [w if w.poll() is None else self.start_worker(i) for i, w in enumerate(self.workers)]
        with Client(scheduler_file=str(self.info), timeout="60s") as client:
            client.wait_for_workers(len(self.workers), timeout=300)
            self.address = client.scheduler.address

    def watch(self, record: Path, lose_after: int | None = None) -> Path:
        """All workers up, then the scheduler's `dask_shard_watch` armed to record into ``record``
        (and to lose a worker after ``lose_after`` finished tasks)."""
        from distributed import Client

        from tests.ops.dask_shard_watch import arm

        self.revive()
        with Client(self.address, timeout="60s") as client:
            client.run_on_scheduler(arm, str(record), lose_after)
        return record

    def log_tails(self, chars: int = 3000) -> str:
        """The end of every process's output, for a failure's message."""
        return "\n".join(
            f"--- {p.name}:\n{p.read_text(errors='replace')[-chars:]}"
            for p in sorted(self.logs.glob("*.log"))
        )


@contextlib.contextmanager
def real_cluster(tmp: Path, workers: int = 2, env: dict[str, str] | None = None, preload: Path | None = None,
                 cores: Sequence[int] | None = None) -> Iterator[RealCluster]:  # fmt: skip
    """A scheduler on 127.0.0.1 and ``workers`` one-thread workers, each declaring one unit of
    `ACCELERATOR`; ``cores`` pins worker i to core cores[i] with `taskset`. Every process is
    stopped on leaving, the scheduler last."""
    logs = tmp / "cluster-logs"
    logs.mkdir(parents=True, exist_ok=True)
    cluster = RealCluster(address="", logs=logs, info=tmp / "scheduler.json", cores=cores,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})  # fmt: skip
    command = [
        *DASK[0],
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--no-dashboard",
        "--scheduler-file",
        str(cluster.info),
    ]
    scheduler = _start([*command, *(["--preload", str(preload)] if preload else [])], cluster.env,
                       logs / "scheduler.log")  # fmt: skip
    try:
        cluster.workers = [cluster.start_worker(i) for i in range(workers)]
        cluster.revive()
        yield cluster
    finally:
        for process in [*cluster.workers, scheduler]:
            _stop(process)


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("w") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def odqa_on(
    cluster: RealCluster, log: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """`odqa ARGS --dask-address <the cluster>` in its own process, its output into ``log``."""
    return _start(
        [*ODQA, *args, "--dask-address", cluster.address],
        {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        log,
    )


def finish(process: subprocess.Popen, log: Path, cluster: RealCluster, watched: Sequence[Path] = (),
           stall: float = STALL_S, limit: float = LIMIT_S) -> None:  # fmt: skip
    """Wait for an `odqa_on` process. It fails the test, killing the process, once neither the
    command nor any cluster process has written anything (output, the files in ``watched``)
    for ``stall`` seconds, or after ``limit`` seconds in all: a hang ends within a bound that
    does not depend on the machine's load, with what every process said."""
    started = time.monotonic()
    while (code := process.poll()) is None:
        written = [log, *watched, *cluster.logs.glob("*.log")]
        quiet = time.time() - max(p.stat().st_mtime for p in written if p.exists())
        if quiet > stall or time.monotonic() - started > limit:
            process.kill()
            process.wait()
            raise AssertionError(f"odqa killed after {time.monotonic() - started:.0f} s, {quiet:.0f} s without "
                                 f"progress:\n{log.read_text(errors='replace')[-4000:]}\n{cluster.log_tails()}")  # fmt: skip
        time.sleep(1)
    if code != 0:
        raise AssertionError(
            f"odqa exited {code}:\n{log.read_text(errors='replace')[-4000:]}\n{cluster.log_tails()}"
        )
