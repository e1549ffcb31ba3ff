"""Encoding throughput on a Dask cluster: one worker against two, each pinned to its own core, and
what a worker killed mid-run costs (issue 33).

A scheduler on 127.0.0.1 and workers started as `taskset -c CORE dask worker ... --nthreads 1
--resources GPU=1 --no-nanny` (so `kill -9` hits the worker itself). Rounds interleave the
configurations (1 worker, 2 workers, 2 workers with one killed after the first third of the
shards), each on a fresh copy of a workspace holding the bundled sample's passages, encoded with
MiniLM in shards of ``--shard-size``. Every configuration first encodes an untimed copy, so the
workers have loaded the model. Throughput is passages / the encode report's `seconds` (the
mapped section: planning, shard tasks, manifest). Prints one line per run and a summary (JSON
with ``--out``). The machine's load average is printed before and after: on a shared machine the
ratio is only as good as the cores the workers really got.

    python benchmarks/bench_scale_out.py [--rounds 2] [--shard-size 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DASK = str(Path(sys.executable).parent / "dask")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_workers(address: str, cores: list[int], log: Path) -> list[subprocess.Popen]:
    from distributed import Client

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    workers = [subprocess.Popen(["taskset", "-c", str(core), DASK, "worker", address, "--nthreads", "1",
                                 "--resources", "GPU=1", "--no-nanny", "--no-dashboard"], env=env,
                                stdout=log.open("ab"), stderr=subprocess.STDOUT) for core in cores]  # fmt: skip
    with Client(address, timeout="60s") as client:
        client.wait_for_workers(len(cores), timeout=300)
    return workers


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _encode(base: Path, scratch: Path, name: str, model: str, shard_size: int, address: str,
            kill: subprocess.Popen | None = None) -> dict:  # fmt: skip
    from odqa.flows.plumbing.task_runners import RunnerSettings
    from odqa.flows.stages.encode import encode_flow
    from odqa.models.searchers.dense import dense_build
    from odqa.pipelines.dense.sharded_encoding import read_manifest
    from odqa.storage import Workspace
    from odqa.storage.model_registry import resolve_model

    ws = scratch / name
    shutil.copytree(base, ws)
    killed_at = None
    if kill is not None:  # kill -9 one worker once a third of the shards are in the manifest
        space = Workspace.resolve(ws)
        out = dense_build(space, resolve_model(space, model)).embeddings
        total = -(-space.rows("passages") // shard_size)

        def killer() -> None:
            nonlocal killed_at
            while (manifest := read_manifest(out)) is None or len(manifest.shards) < total // 3:
                time.sleep(0.05)
            os.kill(kill.pid, signal.SIGKILL)
            killed_at = len(manifest.shards)

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
    started = time.perf_counter()
    report = encode_flow(model=model, workspace=str(ws), shard_size=shard_size, batch_size=16,
                         runner=RunnerSettings(kind="dask", dask_address=address))  # fmt: skip
    wall = time.perf_counter() - started
    shutil.rmtree(ws)
    return {"passages": report.passages, "seconds": report.seconds, "wall_s": round(wall, 2),
            "encoded_now": report.encoded_now, "taken": report.taken,
            "psg_per_s": round(report.passages / report.seconds, 2), "killed_after_shards": killed_at,
            "load_1min": os.getloadavg()[0]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--shard-size", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from odqa.flows.backend.local_server import temporary_server
    from odqa.flows.compositions.pipeline import default_base_model
    from odqa.flows.plumbing.sample_data import SAMPLE_DUMP
    from odqa.flows.stages.wikipedia import ingest_wikipedia_flow

    scratch = Path(tempfile.mkdtemp(prefix="odqa-bench-scale-out-"))
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = (
        Path(tempfile.gettempdir()) / f"odqa-bench-scale-out-dask-{os.getpid()}.log"
    )  # kept: the cluster's story
    print(f"dask scheduler and worker log: {log}", flush=True)
    scheduler = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                                 stdout=log.open("ab"), stderr=subprocess.STDOUT)  # fmt: skip
    runs: dict[str, list[dict]] = {"1 worker": [], "2 workers": [], "2 workers, one killed": []}
    print(f"load average before: {os.getloadavg()}", flush=True)
    try:
        home = scratch / "prefect"
        home.mkdir()
        # odqa's own backend (PostgreSQL where there is one): Prefect's SQLite test harness
        # reported "database is locked" under load
        with temporary_server(home, home / "server.log", label="bench", timeout=600) as server, \
                temporary_settings({PREFECT_API_URL: server.api_url}):  # fmt: skip
            os.environ["PREFECT_API_URL"] = server.api_url  # the workers' too
            model = default_base_model()
            ingest_wikipedia_flow(dump=str(SAMPLE_DUMP), workspace=str(scratch / "base"))
            for round_ in range(args.rounds):
                for name, cores in (
                    ("1 worker", [0]),
                    ("2 workers", [0, 1]),
                    ("2 workers, one killed", [0, 1]),
                ):
                    workers = _start_workers(address, cores, log)
                    try:
                        _encode(scratch / "base", scratch, "warm", model, args.shard_size, address)
                        victim = workers[1] if "killed" in name else None
                        result = _encode(
                            scratch / "base", scratch, "timed", model, args.shard_size, address, victim
                        )
                    finally:
                        _stop(workers)
                    runs[name].append(result)
                    print(f"round {round_ + 1} {name}: {result}", flush=True)
    finally:
        _stop([scheduler])
        shutil.rmtree(scratch, ignore_errors=True)
    median = {name: statistics.median(r["seconds"] for r in rs) for name, rs in runs.items()}
    summary = {"runs": runs, "median_seconds": median,
               "speedup_2_vs_1": round(median["1 worker"] / median["2 workers"], 2),
               "killed_worker_costs_s": round(median["2 workers, one killed"] - median["2 workers"], 1),
               "load_after": os.getloadavg()}  # fmt: skip
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
