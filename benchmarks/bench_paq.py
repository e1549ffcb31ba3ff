"""PAQ sampling at scale: a generated PAQ-format metadata file, ours vs. the naive in-memory way.

The thesis' PAQ sample comes from the 65M-line PAQ.metadata.jsonl. `pipelines.questions.paq`
groups questions by passage out of core (Parquet spill + DuckDB with a memory limit); the
reference is what one writes first: a dict passage -> questions in Python, then the same
filter / sample / split. Both run in their own subprocess on the same generated file so peak
RSS (ru_maxrss) is measured per method. The requirement: ours stays under 2 GB on 5M lines.

    .venv/bin/python benchmarks/bench_paq.py [--lines 5000000] [--workdir /tmp/odqa_bench_paq]

The generated file imitates PAQ's metadata lines (question, subsets, answer, passage_score,
answers[] with passage_id/offset/text/extractor): 1M passages drawn uniformly (about 5 questions
each, so most pass the >= 3 filter), 20% of questions also generated from a second passage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WORDS = ["who", "what", "when", "where", "which", "river", "king", "album", "film", "city", "war", "team", "novel", "born", "wrote", "played", "founded", "country", "president", "song", "league", "season", "island", "church", "company", "bridge", "station", "award"]


def generate(path: Path, lines: int, passages: int = 1_000_000, seed: int = 0) -> None:
    rng = random.Random(seed)
    tmp = path.with_suffix(".partial")
    with tmp.open("w", encoding="utf-8") as out:
        for i in range(lines):
            pids = [str(rng.randrange(passages))]
            if rng.random() < 0.2:
                pids.append(str(rng.randrange(passages)))
            answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))).title()
            question = f"{rng.choice(WORDS[:5])} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 11))) + f" {i}"
            record = {
                "question": question,
                "subsets": rng.sample(["L1", "L4", "NE"], rng.randint(1, 2)),
                "answer": [answer],
                "passage_score": round(rng.uniform(-12, -0.5), 4),
                "answers": [{"passage_id": pid, "offset": rng.randrange(600), "text": answer,
                             "extractor": rng.choice(["L", "NE"])} for pid in pids],
            }
            out.write(json.dumps(record) + "\n")
    tmp.rename(path)


def run_ours(path: Path, workdir: Path) -> dict:
    from odqa.pipelines.questions.paq import PaqConfig, sample_paq

    result = sample_paq(path, workdir / "ours_tmp", config=PaqConfig(memory_limit="1GB", threads=2))
    return {"report": result.report, "questions": result.questions.num_rows, "flipped": result.flipped.num_rows}


def run_naive(path: Path, workdir: Path) -> dict:
    """Reference: everything in a Python dict, then the same filter/sample/split rules."""
    by_passage: dict[str, dict[str, list[str]]] = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            for span in record["answers"]:
                by_passage.setdefault(str(span["passage_id"]), {})[record["question"]] = record["answer"]
    eligible = [pid for pid, qs in by_passage.items() if len(qs) >= 3]
    ranked = sorted(eligible, key=lambda p: (hashlib.md5(f"0|{p}".encode()).hexdigest(), p))[:100_000]
    chosen = [min(by_passage[p], key=lambda q: (hashlib.md5(f"0|{q}".encode()).hexdigest(), q)) for p in ranked]
    return {"report": {"eligible_passages": len(eligible), "sampled_passages": len(chosen)}, "questions": len(chosen)}


def child(method: str, path: Path, workdir: Path) -> None:
    start = time.perf_counter()
    out = (run_ours if method == "ours" else run_naive)(path, workdir)
    out["seconds"] = round(time.perf_counter() - start, 1)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=5_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/odqa_bench_paq"))
    parser.add_argument("--skip-naive", action="store_true", help="only run our implementation")
    parser.add_argument("--child", choices=["ours", "naive"], help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.file, args.workdir)
        return

    args.workdir.mkdir(parents=True, exist_ok=True)
    path = args.workdir / f"PAQ.metadata.{args.lines}.jsonl"
    if not path.exists():
        start = time.perf_counter()
        generate(path, args.lines)
        print(f"generated {path} ({path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - start:.0f} s")
    results = {}
    for method in ("ours",) + (() if args.skip_naive else ("naive",)):
        proc = subprocess.run(
            [sys.executable, __file__, "--child", method, "--file", str(path), "--workdir", str(args.workdir)],
            capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"},
        )
        if proc.returncode != 0:
            raise SystemExit(f"{method} failed:\n{proc.stderr[-3000:]}")
        results[method] = json.loads(proc.stdout.strip().splitlines()[-1])
    load = os.getloadavg()
    print(f"\nPAQ sampling, {args.lines:,} lines, {path.stat().st_size / 1e9:.2f} GB, load avg {load[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'method':<8} {'seconds':>8} {'peak RSS MB':>12}")
    for method, r in results.items():
        print(f"{method:<8} {r['seconds']:>8} {r['peak_rss_mb']:>12}")
    ours = results["ours"]
    print("ours:", json.dumps(ours["report"]))
    if "naive" in results:
        naive = results["naive"]
        print(f"ratios ours/naive: time {ours['seconds'] / naive['seconds']:.2f}, "
              f"peak RSS {ours['peak_rss_mb'] / naive['peak_rss_mb']:.2f}")
        assert naive["report"]["eligible_passages"] == ours["report"]["eligible_passages"]
    assert ours["peak_rss_mb"] < 2048, "peak RSS above 2 GB"
    split = (ours["report"]["sampled_train"], ours["report"]["sampled_dev"], ours["report"]["sampled_test"])
    assert split == (70_000, 15_000, 15_000) or ours["report"]["sampled_passages"] < 100_000, split


if __name__ == "__main__":
    main()
