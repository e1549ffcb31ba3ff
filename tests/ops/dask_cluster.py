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

from odqa.flows.task_runners import ACCELERATOR

REPO_ROOT = Path(__file__).resolve().parents[2]
DASK = (
    [sys.executable, "-m", "distributed.cli.dask_scheduler"],
    [sys.executable, "-m", "distributed.cli.dask_worker"],
)
STALL_S = 120.0  # no process wrote anything for this long: a hang, whatever the load
LIMIT_S = 480.0  # below pytest's timeout of 600 s
ODQA = [sys.executable, "-c", "import sys; from odqa.flows.cli import main; sys.exit(main())"]


@dataclass
class RealCluster:
    """The scheduler's address, the worker processes and where every process writes its output."""

    address: str
    logs: Path
    workers: list[subprocess.Popen] = field(default_factory=list)

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
    from distributed import Client

    logs = tmp / "cluster-logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    info = tmp / "scheduler.json"
    scheduler_cmd = [
        *DASK[0],
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--no-dashboard",
        "--scheduler-file",
        str(info),
    ]
    if preload is not None:
        scheduler_cmd += ["--preload", str(preload)]
    scheduler = _start(scheduler_cmd, env, logs / "scheduler.log")
    started = [scheduler]
    try:
        cluster = RealCluster(address="", logs=logs)
        for i in range(workers):
            pin = ["taskset", "-c", str(cores[i])] if cores else []
            cluster.workers.append(_start([*pin, *DASK[1], "--scheduler-file", str(info), "--no-nanny", "--nthreads", "1",
                                           "--resources", f"{ACCELERATOR}=1", "--no-dashboard", "--name", f"w{i}",
                                           "--death-timeout", "60"], env, logs / f"worker-{i}.log"))  # fmt: skip
            started.append(cluster.workers[-1])
        with Client(scheduler_file=str(info), timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)
            cluster.address = client.scheduler.address
        yield cluster
    finally:
        for process in reversed(started):
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
            process.wait()


def odqa_on(
    cluster: RealCluster, log: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """`odqa ARGS --dask-address <the cluster>` in its own process, its output into ``log``."""
    return _start(
        [*ODQA, *args, "--dask-address", cluster.address],
        {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        log,
    )


def finish(process: subprocess.Popen, log: Path, cluster: RealCluster, stall: float = STALL_S,
           limit: float = LIMIT_S) -> None:  # fmt: skip
    """Wait for an `odqa_on` process. It fails the test, killing the process, once neither the
    command nor any cluster process has written anything (output, the scheduler's watch record)
    for ``stall`` seconds, or after ``limit`` seconds in all: a hang ends within a bound that
    does not depend on the machine's load, with what every process said."""
    started = time.monotonic()
    while (code := process.poll()) is None:
        quiet = time.time() - max(p.stat().st_mtime for p in [log, *cluster.logs.parent.glob("*.json"),
                                                                *cluster.logs.glob("*.log")])  # fmt: skip
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
