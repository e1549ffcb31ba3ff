"""What read leases (`storage/read_leases.py`) cost: a table scan with its lease against the same
scan without one, and a commit whose collection reads many live leases against one that reads none.

    .venv/bin/python benchmarks/bench_read_leases.py [--rows 2000] [--parts 10] [--leases 50]
        [--repeats 40] [--json benchmarks/results/read_leases.json]

A scratch workspace's passages table holds ``--parts`` committed files of ``--rows`` rows in all.
*Scan*: every batch of the table, through `Workspace.scan` (lease written under the lease lock,
deleted at the end) and through the bare pyarrow dataset of the same snapshot (no lease). *Commit*:
one commit that replaces a one-row source, with no other reader and with ``--leases`` live leases
held by this process (each naming every file). The variants alternate; medians and best of
``--repeats``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from odqa.storage import Workspace  # noqa: E402
from odqa.storage.tables import table_dataset  # noqa: E402


def fill(ws: Workspace, rows: int, parts: int) -> None:
    with ws.transaction("bench") as tx:
        size = -(-rows // parts)
        for part in range(parts):
            tx.write("passages", [{"passage_id": f"p{part}-{i}", "article_id": 1, "title": "T", "text": "x " * 50,
                                   "position": i} for i in range(size)], source="src", part=f"p{part}")  # fmt: skip


def leased_scan(ws: Workspace) -> int:
    return sum(batch.num_rows for batch in ws.scan("passages"))


def bare_scan(ws: Workspace) -> int:
    return sum(batch.num_rows for batch in table_dataset(ws.root, ws.snapshot(), "passages").to_batches())


def small_commit(ws: Workspace, n: int) -> None:
    with ws.transaction("bench-commit") as tx:
        tx.replace_source("passages", "one")
        tx.write("passages", [{"passage_id": f"one-{n}", "article_id": 1, "title": "T", "text": "y", "position": 0}],
                 source="one")  # fmt: skip


def timed(fn, *args) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def summary(seconds: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(seconds) * 1000, 3), "best_ms": round(min(seconds) * 1000, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--parts", type=int, default=10)
    parser.add_argument("--leases", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="odqa-bench-leases-") as folder:
        ws = Workspace.resolve(Path(folder) / "ws")
        fill(ws, args.rows, args.parts)
        assert leased_scan(ws) == bare_scan(ws)
        scans: dict[str, list[float]] = {"leased": [], "bare": []}
        for _ in range(args.repeats):
            scans["leased"].append(timed(leased_scan, ws))
            scans["bare"].append(timed(bare_scan, ws))
        commits: dict[str, list[float]] = {"no_leases": [], "with_leases": []}
        for n in range(args.repeats):
            commits["no_leases"].append(timed(small_commit, ws, 2 * n))
            with contextlib.ExitStack() as held:
                for _ in range(args.leases):
                    held.enter_context(ws.reading("passages", what="bench reader"))
                commits["with_leases"].append(timed(small_commit, ws, 2 * n + 1))
    result = {
        "rows": args.rows, "parts": args.parts, "leases": args.leases, "repeats": args.repeats,
        "scan": {name: summary(values) for name, values in scans.items()},
        "commit": {name: summary(values) for name, values in commits.items()},
    }  # fmt: skip
    result["scan_lease_ms"] = round(result["scan"]["leased"]["median_ms"] - result["scan"]["bare"]["median_ms"], 3)
    result["commit_per_lease_ms"] = round((result["commit"]["with_leases"]["median_ms"]
                                           - result["commit"]["no_leases"]["median_ms"]) / args.leases, 4)  # fmt: skip
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
