"""What a subflow costs under odqa: Prefect 3.8.8's heartbeat join against odqa's prompt stop
(`flows/plumbing/prefect_fixes.py:prompt_heartbeat_shutdown`), side by side on one server.

    .venv/bin/python benchmarks/bench_subflow_overhead.py [--subflows 20] [--repeats 3] [--out FILE.json]

One temporary Prefect server on the project's backend (the local PostgreSQL, else SQLite) with
the test suite's service settings; then, alternating, a fresh process per run runs a flow of
``--subflows`` trivial subflows (one task and one ``odqa`` log record each) either with Prefect's
own heartbeat context ("prefect") or with odqa's ("odqa"), heartbeats on at Prefect's default
interval in both. Recorded per run: wall seconds per subflow, the client process's CPU seconds
per subflow, and the server's. The ratio is the median wall time of "prefect" over "odqa".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUN = r"""
import json, sys, time
import psutil
from prefect import flow, task
mode, subflows, server_pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if mode == "odqa":
    import odqa.flows.plumbing.runtime  # every odqa flow module imports it: the fix applied

@task
def one(i: int) -> int:
    return i

@flow
def child(i: int) -> int:
    import logging
    logging.getLogger("odqa").info("subflow %d", i)
    return one(i)

@flow
def parent(n: int) -> None:
    for i in range(n):
        child(i)

parent(1)  # the first flow run pays the client's set-up
server = psutil.Process(server_pid)
before, cpu = server.cpu_times(), time.process_time()
started = time.perf_counter()
parent(subflows)
wall = time.perf_counter() - started
time.sleep(3)  # the server's recorders catch up with the events
after = server.cpu_times()
print(json.dumps({"mode": mode, "wall_s": wall / subflows, "client_cpu_s": (time.process_time() - cpu) / subflows,
                  "server_cpu_s": (after.user + after.system - before.user - before.system) / subflows}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subflows", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.environ["PREFECT_SERVER_ALLOW_EPHEMERAL_MODE"] = "false"
    import tests.conftest  # noqa: F401  (the suite's server settings, set in the environment)
    from odqa.flows.backend.local_server import temporary_server
    from tests.conftest import _start_cluster

    _start_cluster()
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        with temporary_server(home, home / "server.log", label="bench", timeout=300) as server:
            env = {**os.environ, "PREFECT_API_URL": server.api_url, "PYTHONPATH": str(ROOT)}
            for repeat in range(args.repeats):
                for mode in (("prefect", "odqa") if repeat % 2 == 0 else ("odqa", "prefect")):
                    out = subprocess.run([sys.executable, "-c", RUN, mode, str(args.subflows), str(server.process.pid)],
                                         env=env, capture_output=True, text=True, check=True).stdout  # fmt: skip
                    runs.append(json.loads(out.strip().splitlines()[-1]))
                    print(runs[-1], flush=True)
    summary = {mode: {key: statistics.median(r[key] for r in runs if r["mode"] == mode)
                      for key in ("wall_s", "client_cpu_s", "server_cpu_s")} for mode in ("prefect", "odqa")}  # fmt: skip
    summary["wall_ratio_prefect_over_odqa"] = summary["prefect"]["wall_s"] / summary["odqa"]["wall_s"]
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"subflows": args.subflows, "runs": runs, "summary": summary}, indent=1) + "\n",
                            encoding="utf-8")  # fmt: skip


if __name__ == "__main__":
    main()
