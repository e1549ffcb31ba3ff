"""Encoding throughput on a Dask cluster: one worker against two, each pinned to its own core, and
what a worker killed mid-run costs (issue 33; target: 2 workers >= 1.7x the passages/s of 1).

A scheduler on 127.0.0.1 and workers started as `taskset -c CORE dask worker ... --nthreads 1
--resources GPU=1 --no-nanny` (so `kill -9` hits the worker itself). The passages are squad24's
(`--data`, the first `--passages` of them; the script says so and exits when the folder is
absent), imported once into a base workspace; each run encodes a fresh copy of it with the
bundled MiniLM in shards of ``--shard-size``, on the Dask runner. The configurations (1 worker,
2 workers, 2 workers with one killed once a third of the shards are in the manifest) are
interleaved, the order reversed every other round (1w 2w 2k, 2k 2w 1w, ...) so that a drift in
the machine's load falls on both sides. Every configuration starts its own workers and first
encodes an untimed workspace of one shard per worker, so they have loaded the model.
Throughput is passages / the encode report's `seconds` (the mapped section: planning, shard
tasks, manifest). Prints one line per run and a summary: median passages/s of each configuration, the 2-worker/1-worker ratio, and the
seconds a killed worker adds to the run (JSON with ``--out``). The load average is recorded
with every run: on a shared machine the ratio is only as good as the cores the workers got.

    python benchmarks/bench_scale_out.py [--rounds 3] [--shard-size 100] [--passages 0] [--cores 0,1]
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
SQUAD24 = REPO.parent / "shared" / "data" / "squad24"
CONFIGURATIONS = ("1 worker", "2 workers", "2 workers, one killed")


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
    finished = threading.Event()
    if kill is not None:  # kill -9 one worker once a third of the shards are in the manifest
        space = Workspace.resolve(ws)
        out = dense_build(space, resolve_model(space, model)).embeddings
        total = -(-space.rows("passages") // shard_size)

        def killer() -> None:
            nonlocal killed_at
            while (manifest := read_manifest(out)) is None or len(manifest.shards) < total // 3:
                if finished.wait(0.05):
                    return  # the run ended first: no worker of a later run is killed
            os.kill(kill.pid, signal.SIGKILL)
            killed_at = len(manifest.shards)

        threading.Thread(target=killer, daemon=True).start()
    load = os.getloadavg()[0]
    started = time.perf_counter()
    try:
        report = encode_flow(model=model, workspace=str(ws), shard_size=shard_size, batch_size=16,
                             runner=RunnerSettings(kind="dask", dask_address=address))  # fmt: skip
    finally:
        finished.set()
    wall = time.perf_counter() - started
    shutil.rmtree(ws)
    return {"passages": report.passages, "seconds": report.seconds, "wall_s": round(wall, 2),
            "encoded_now": report.encoded_now, "taken": report.taken,
            "psg_per_s": round(report.passages / report.seconds, 2), "killed_after_shards": killed_at,
            "load_1min_before": load, "load_1min_after": os.getloadavg()[0]}  # fmt: skip


def _passages(data: Path, limit: int, scratch: Path) -> Path:
    """squad24's passages.tsv, or a copy of its header and first ``limit`` passages (0: all)."""
    source = data / "passages.tsv"
    if not limit:
        return source
    subset = scratch / f"passages-{limit}.tsv"
    with source.open(encoding="utf-8") as lines, subset.open("w", encoding="utf-8") as out:
        for number, line in enumerate(lines):
            if number > limit:
                break
            out.write(line)
    return subset


def summarize(runs: dict[str, list[dict]], target: float = 1.7) -> dict:
    """Medians of each configuration, the 2-worker/1-worker ratio of passages/s (against
    ``target``), and the seconds a killed worker adds to a 2-worker run."""
    rate = {name: statistics.median(r["psg_per_s"] for r in rs) for name, rs in runs.items() if rs}
    seconds = {name: statistics.median(r["seconds"] for r in rs) for name, rs in runs.items() if rs}
    speedup = round(rate["2 workers"] / rate["1 worker"], 2)
    return {"median_psg_per_s": rate, "median_seconds": seconds, "speedup_2_vs_1": speedup,
            "target": target, "target_met": speedup >= target,
            "killed_worker_costs_s": round(seconds["2 workers, one killed"] - seconds["2 workers"], 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="Runs of each configuration")
    parser.add_argument("--shard-size", type=int, default=100)
    parser.add_argument("--passages", type=int, default=0, help="Encode the first N passages only (0: all)")
    parser.add_argument("--data", type=Path, default=SQUAD24, help="The squad24 folder (passages.tsv)")
    parser.add_argument("--cores", default="0,1", help="The two cores the workers are pinned to (taskset -c)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not (args.data / "passages.tsv").is_file():
        print(f"skipped: no squad24 passages at {args.data / 'passages.tsv'} (--data names the folder)")
        return
    cores = [int(core) for core in args.cores.split(",")]
    if len(cores) != 2:
        parser.error("--cores names two cores, e.g. 0,1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from odqa.flows.backend.local_server import temporary_server
    from odqa.flows.compositions.pipeline import default_base_model
    from odqa.flows.stages.passages import import_passages_flow

    scratch = Path(tempfile.mkdtemp(prefix="odqa-bench-scale-out-"))
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = (
        Path(tempfile.gettempdir()) / f"odqa-bench-scale-out-dask-{os.getpid()}.log"
    )  # kept: the cluster's story
    print(f"dask scheduler and worker log: {log}", flush=True)
    scheduler = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                                 stdout=log.open("ab"), stderr=subprocess.STDOUT)  # fmt: skip
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGURATIONS}
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
            imported = import_passages_flow(fmt="dpr-tsv", path=str(_passages(args.data, args.passages, scratch)),
                                            workspace=str(scratch / "base"))  # fmt: skip
            # the untimed warm-up: one shard per worker, enough for each to load the model
            import_passages_flow(fmt="dpr-tsv", path=str(_passages(args.data, 2 * args.shard_size, scratch)),
                                 workspace=str(scratch / "warm-base"))  # fmt: skip
            print(f"{imported.passages} passages of {args.data}, shards of {args.shard_size}, "
                  f"workers on cores {cores}", flush=True)  # fmt: skip
            for round_ in range(args.rounds):
                order = CONFIGURATIONS if round_ % 2 == 0 else CONFIGURATIONS[::-1]
                for name in order:
                    workers = _start_workers(address, cores[:1] if name == "1 worker" else cores, log)
                    try:
                        _encode(scratch / "warm-base", scratch, "warm", model, args.shard_size, address)
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
    summary = {"runs": runs, **summarize(runs), "load_after": os.getloadavg()}
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
