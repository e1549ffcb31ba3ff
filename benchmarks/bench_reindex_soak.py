"""The re-index soak of issue 41, recorded: `tests/boundaries/test_reindex_soak.py` with more runs.

Re-index runs back to back while a second process drops files into `incoming/` at random moments
(renamed, cut, replaced, malformed, abandoned, a symlink) and a real `odqa serve` answers a bounded
stream of requests to BM25, dense and hybrid. The test's own checks hold (passages = exactly the
complete files' rows, no failed request, every retriever kept, no secret in any log); this script
writes the figures it measured to `benchmarks/results/reindex_soak_<runs>.json`:

    .venv/bin/python benchmarks/bench_reindex_soak.py --runs 40
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="re-index runs while the writer writes")
    args = parser.parse_args()
    out = REPO / "benchmarks" / "results" / f"reindex_soak_{args.runs}.json"
    env = {**os.environ, "ODQA_SOAK_RUNS": str(args.runs), "ODQA_SOAK_FIGURES": str(out)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/boundaries/test_reindex_soak.py"], cwd=REPO, env=env)  # fmt: skip
    if done.returncode == 0:
        print(out.read_text(encoding="utf-8"))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
