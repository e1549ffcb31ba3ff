"""BM25 through our code vs pyserini called directly, on the same corpus in the same run.

    .venv/bin/python benchmarks/bench_bm25.py [--passages 60000] [--queries 3000] [--threads 2]

Index build: ours = ``build_index`` from an iterator of (id, title, text) records (JSON-lines
writing, indexing, metadata, atomic rename); direct = ``python -m pyserini.index.lucene`` on
JsonCollection files that already exist (writing them is not timed, so all of our JSON work
counts as overhead). Search: ours = ``Bm25Searcher.search`` producing Arrow run batches;
direct = ``LuceneSearcher.batch_search`` plus reading each hit's docid and score. Both sides
run ``--repeats`` times, interleaved, after a warm-up search; medians are reported with the
ratio ours / direct (the acceptance bar is <= 1.10). The corpus is synthetic: passages of
100 words drawn from a Zipf-distributed vocabulary of pronounceable pseudo-words, queries of
8 words taken mostly from one passage each, so that every query has real matches.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from odqa.pipelines.retrieval.bm25 import Bm25Searcher, build_index, open_index, passage_contents  # noqa: E402
from odqa.pipelines.retrieval.java import ensure_java  # noqa: E402

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def make_corpus(
    passages: int, queries: int, seed: int = 0
) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    rng = np.random.default_rng(seed)
    vocabulary = np.array(
        ["".join(rng.choice(SYLLABLES, size=rng.integers(2, 5))) for _ in range(60_000)], dtype=object
    )
    vocabulary = np.unique(vocabulary)
    ranks = np.arange(1, len(vocabulary) + 1)
    weights = 1.0 / ranks**1.05
    weights /= weights.sum()
    words = rng.choice(len(vocabulary), size=(passages, 102), p=weights)
    records = [
        (f"doc{i}", " ".join(vocabulary[row[:2]]).title(), " ".join(vocabulary[row[2:]]))
        for i, row in enumerate(words)
    ]
    questions = []
    for q in range(queries):
        source = words[rng.integers(passages)]
        picked = list(vocabulary[rng.choice(source, size=6, replace=False)])
        picked += list(vocabulary[rng.choice(len(vocabulary), size=2, p=weights)])
        questions.append((f"q{q}", " ".join(picked)))
    return records, questions


def write_collection(records: list[tuple[str, str, str]], folder: Path, files: int) -> None:
    """The JsonCollection a pyserini user would prepare by hand (same sharding as ours)."""
    folder.mkdir(parents=True)
    shards: list[list[str]] = [[] for _ in range(files)]
    for n, (pid, title, text) in enumerate(records, start=1):
        shards[n % files].append(json.dumps({"id": pid, "contents": passage_contents(title, text)}) + "\n")
    for i, lines in enumerate(shards):
        (folder / f"part-{i:04d}.jsonl").write_text("".join(lines), encoding="utf-8")


def _cpu() -> float:
    """CPU seconds of this process (all threads, the in-process JVM included) and its children.

    On a machine shared with other jobs, wall time mostly measures the neighbours; CPU time is
    the robust measure of how much work each side does.
    """
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(action) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``action()``."""
    wall, cpu = time.perf_counter(), _cpu()
    action()
    return time.perf_counter() - wall, _cpu() - cpu


def direct_build(collection: Path, index: Path, threads: int) -> None:
    command = [
        sys.executable, "-m", "pyserini.index.lucene", "--collection", "JsonCollection",
        "--generator", "DefaultLuceneDocumentGenerator", "--input", str(collection), "--index", str(index),
        "--threads", str(threads), "--storePositions", "--storeDocvectors", "--storeRaw",
    ]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=60_000)
    parser.add_argument("--queries", type=int, default=3_000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    ensure_java()
    records, questions = make_corpus(args.passages, args.queries)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-bm25-") as tmp:
        root = Path(tmp)
        write_collection(records, root / "collection", args.threads)
        ours_build, direct_builds = [], []
        for r in range(args.repeats):
            direct_builds.append(
                timed(lambda r=r: direct_build(root / "collection", root / f"direct-{r}", args.threads))
            )
            ours_build.append(
                timed(lambda: build_index(iter(records), root / "ours", snapshot="b", threads=args.threads))
            )
            print(f"build {r} (wall, cpu): ours {ours_build[-1]}  direct {direct_builds[-1]}", flush=True)

        from pyserini.search.lucene import LuceneSearcher  # after ensure_java: starts the JVM

        ours = Bm25Searcher(open_index(root / "ours", "b"))
        direct = LuceneSearcher(str(root / "direct-0"))
        direct.set_bm25(0.9, 0.4)
        qids = [q for q, _ in questions]
        texts = [t for _, t in questions]

        def run_direct() -> dict[str, list[tuple[str, float]]]:
            hits = direct.batch_search(texts, qids, k=args.k, threads=args.threads)
            return {qid: [(h.docid, h.score) for h in hits[qid]] for qid in qids}

        results: dict[str, object] = {}

        def run_ours() -> None:
            results["ours"] = list(ours.search(questions, k=args.k, threads=args.threads))

        def run_pyserini() -> None:
            results["direct"] = run_direct()

        run_pyserini(), run_ours()  # warm-up: JIT, page cache
        ours_search, direct_search = [], []
        for r in range(args.repeats):
            direct_search.append(timed(run_pyserini))
            ours_search.append(timed(run_ours))
            print(f"search {r} (wall, cpu): ours {ours_search[-1]}  direct {direct_search[-1]}", flush=True)
        batches, direct_hits = results["ours"], results["direct"]

        rows = [row for batch in batches for row in batch.to_pylist()]
        same = [(r["passage_id"], r["score"]) for r in rows if r["question_id"] == qids[0]] == direct_hits[
            qids[0]
        ]
        retrieved = sum(len(v) for v in direct_hits.values())
        assert len(rows) == retrieved and same, "our run differs from pyserini's"

    def line(
        what: str, unit: str, n: int, ours_t: list[tuple[float, float]], direct_t: list[tuple[float, float]]
    ) -> str:
        o, d = (
            (statistics.median(t[0] for t in ours_t), statistics.median(t[1] for t in ours_t)),
            (statistics.median(t[0] for t in direct_t), statistics.median(t[1] for t in direct_t)),
        )
        return (
            f"| {what} | {n / o[0]:,.0f} {unit}/s ({o[0]:.1f} s wall, {o[1]:.1f} s CPU) "
            f"| {n / d[0]:,.0f} {unit}/s ({d[0]:.1f} s wall, {d[1]:.1f} s CPU) | {o[0] / d[0]:.3f} | {o[1] / d[1]:.3f} |"
        )

    print()
    print(f"{args.passages:,} passages (100 words + 2-word title), {args.queries:,} queries of 8 words, "
          f"k={args.k}, {args.threads} threads, median of {args.repeats}; "
          f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
    print()
    print("| step | ours | pyserini direct | wall ratio ours/direct | CPU ratio ours/direct |")
    print("| --- | --- | --- | --- | --- |")
    print(line("index build", "docs", args.passages, ours_build, direct_builds))
    print(line("batch search", "queries", args.queries, ours_search, direct_search))


if __name__ == "__main__":
    main()
