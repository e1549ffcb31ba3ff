"""Training throughput of `odqa train` against the quality benchmark's anchor (sentence-transformers'
MultipleNegativesRankingLoss fine-tune), side by side in one run.

    .venv/bin/python benchmarks/bench_anchor_speed.py --workspace /tmp/bq [--steps 24 --repeats 2
        --precisions none,bf16 --threads 1]

Both sides train all-MiniLM-L6-v2 on the same squad24 examples (the quality benchmark's training
set with one BM25 hard negative, exported from the workspace for the anchor), with the same
steps, batch, learning rate, lengths and torch threads, once per precision (fp32, and bf16
autocast where the CPU has bf16 units). The runs are interleaved (odqa, anchor, anchor, odqa,
...) so load drift on a shared machine hits both sides alike. Figures are the training loops'
own: odqa's `training_log` (wall and process CPU seconds) and the anchor's `train.json`; start-up,
data loading and saving are left out on both sides. The table gives the medians over repeats
and the odqa/anchor ratios of examples per second and per CPU second.

The workspace is the quality benchmark's (`benchmarks/bench_quality.py` prepares it on first use).
Results: `<workspace>/bench_quality/speed.json` (`speed-buckets<N>.json` with `--bucket-tokens N`,
which gives odqa length buckets: the anchor has no such option).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench_quality import DEFAULT_DATA, Bench, Recipe, anchor_command, load_average, minilm_dir

SIDES = ("odqa", "anchor")


def odqa_run(bench: Bench, recipe: Recipe, name: str) -> dict[str, float]:
    """`odqa train --arch sde` with the recipe: the loop's wall and CPU seconds (a fresh model id
    per call: the same id and inputs again would be a no-op)."""
    model_id = f"speed-{name}-{time.strftime('%Y%m%dT%H%M%S')}"
    bench.run("train", "--arch", "sde", "--base", minilm_dir(), "--train", bench.train_set(recipe.hard_negatives),
              "--model-id", model_id, *recipe.train_options())  # fmt: skip
    last = bench.sql(f"SELECT elapsed_s, cpu_s FROM training_log WHERE model_id = '{model_id}' "
                     "ORDER BY step DESC LIMIT 1")[0]  # fmt: skip
    return {"wall_s": float(last["elapsed_s"]), "cpu_s": float(last["cpu_s"])}


def anchor_run(bench: Bench, recipe: Recipe, name: str) -> dict[str, float]:
    """The anchor with the recipe: its loop's wall and CPU seconds."""
    output = bench.folder / "speed" / name
    bench.run(*anchor_command(bench, recipe, output, bf16=recipe.amp == "bf16", snapshot_every=None), odqa=False)
    costs = json.loads((output / "train.json").read_text(encoding="utf-8"))
    return {"wall_s": float(costs["elapsed_s"]), "cpu_s": float(costs["cpu_s"])}


def summary(runs: list[dict[str, Any]], examples: int) -> list[dict[str, Any]]:
    """Medians per precision and side, and the odqa/anchor ratios."""
    rows = []
    for precision in sorted({r["precision"] for r in runs}):
        median = {side: {key: statistics.median(r[key] for r in runs if r["side"] == side
                                                and r["precision"] == precision)
                         for key in ("wall_s", "cpu_s")} for side in SIDES}  # fmt: skip
        speed = {side: (examples / median[side]["wall_s"], examples / median[side]["cpu_s"]) for side in SIDES}
        rows.append({"precision": precision,
                     **{f"{side} examples/s": round(speed[side][0], 2) for side in SIDES},
                     **{f"{side} examples/CPU-s": round(speed[side][1], 2) for side in SIDES},
                     "ratio examples/s": round(speed["odqa"][0] / speed["anchor"][0], 3),
                     "ratio examples/CPU-s": round(speed["odqa"][1] / speed["anchor"][1], 3)})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--precisions", default="none,bf16", help="Comma list of none and bf16.")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bucket-tokens", type=int, default=None,
                        help="odqa only: length buckets of at most N padded tokens (the anchor has none).")
    args = parser.parse_args()
    bench = Bench(args.workspace, args.data, heldout_articles=2)
    bench.prepare()
    base = Recipe(steps=args.steps, batch_size=args.batch_size, threads=args.threads, bucket_tokens=args.bucket_tokens)
    runs: list[dict[str, Any]] = []
    started_load = load_average()
    for repeat in range(args.repeats):
        for precision in args.precisions.split(","):
            recipe = replace(base, amp=precision)
            order = SIDES if repeat % 2 == 0 else tuple(reversed(SIDES))
            for side in order:
                name = f"{side}-{precision}-{repeat}"
                measured = (odqa_run if side == "odqa" else anchor_run)(bench, recipe, name)
                runs.append({"side": side, "precision": precision, "repeat": repeat, **measured})
                print(f"{name}: {measured}", file=sys.stderr, flush=True)
    examples = args.steps * args.batch_size
    table = summary(runs, examples)
    result = {"steps": args.steps, "batch_size": args.batch_size, "threads": args.threads,
              "odqa_bucket_tokens": args.bucket_tokens, "examples": examples,
              "load": [started_load, load_average()], "runs": runs, "table": table}  # fmt: skip
    suffix = f"-buckets{args.bucket_tokens}" if args.bucket_tokens else ""
    (bench.folder / f"speed{suffix}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    header = list(table[0])
    print("| " + " | ".join(header) + " |\n|" + " --- |" * len(header))
    for row in table:
        print("| " + " | ".join(str(row[h]) for h in header) + " |")


if __name__ == "__main__":
    main()
