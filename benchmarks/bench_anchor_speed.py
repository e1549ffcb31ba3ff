"""Training throughput of `odqa train` against the quality benchmark's anchor (sentence-transformers'
MultipleNegativesRankingLoss fine-tune), side by side in one run.

    .venv/bin/python benchmarks/bench_anchor_speed.py --workspace /tmp/bq [--steps 24 --repeats 2
        --precisions none,bf16 --threads 1 --bucket-tokens none,2048]

Both sides train all-MiniLM-L6-v2 on the same squad24 examples (the quality benchmark's training
set with one BM25 hard negative, exported from the workspace for the anchor), with the same
steps, batch, learning rate, lengths and torch threads, once per precision (fp32, and bf16
autocast where the CPU has bf16 units). `--bucket-tokens` lists odqa's sides: `none` (one padded
block per batch) and/or N (length buckets of at most N padded tokens; the anchor has no such
option), each an odqa side of its own. The runs are interleaved (odqa, anchor, anchor, odqa, ...;
with several odqa sides every repeat reverses the order of all of them) so load drift on a shared
machine hits every side alike. Figures are the training loops'
own: odqa's `training_log` (wall and process CPU seconds) and the anchor's `train.json`; start-up,
data loading and saving are left out on both sides. The table gives the medians over repeats
and each odqa side's ratio to the anchor in examples per second and per CPU second.

The workspace is the quality benchmark's (`benchmarks/bench_quality.py` prepares it on first use).
Results: `<workspace>/bench_quality/speed.json` (`speed-buckets<N>.json` with `--bucket-tokens N`,
`speed-buckets<A>-<B>.json` with several values).
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

ANCHOR = "anchor"


def odqa_side(bucket_tokens: int | None) -> str:
    return f"odqa-buckets{bucket_tokens}" if bucket_tokens else "odqa"


def parse_buckets(text: str) -> list[int | None]:
    """`none,2048` -> [None, 2048]: one odqa side per value."""
    values = [None if v.strip() == "none" else int(v) for v in text.split(",") if v.strip()]
    if not values or any(v is not None and v < 1 for v in values):
        raise argparse.ArgumentTypeError(
            f"--bucket-tokens {text!r}: expected a comma list of none and N >= 1"
        )
    return values


def odqa_run(bench: Bench, recipe: Recipe, name: str) -> dict[str, float]:
    """`odqa train --arch sde` with the recipe: the loop's wall and CPU seconds (a fresh model id
    per call: the same id and inputs again would be a no-op)."""
    model_id = f"speed-{name}-{time.strftime('%Y%m%dT%H%M%S')}"
    trained = bench.run("train", "--arch", "sde", "--base", minilm_dir(), "--train",
                        bench.train_set(recipe.hard_negatives), "--model-id", model_id, *recipe.train_options())  # fmt: skip
    last = bench.sql(f"SELECT elapsed_s, cpu_s FROM training_log WHERE model_id = '{model_id}' "
                     "ORDER BY step DESC LIMIT 1")[0]  # fmt: skip
    return {"wall_s": float(last["elapsed_s"]), "cpu_s": float(last["cpu_s"]), "peak_mb": trained.peak_mb}


def anchor_run(bench: Bench, recipe: Recipe, name: str) -> dict[str, float]:
    """The anchor with the recipe: its loop's wall and CPU seconds."""
    output = bench.folder / "speed" / name
    trained = bench.run(
        *anchor_command(bench, recipe, output, bf16=recipe.amp == "bf16", snapshot_every=None), odqa=False
    )
    costs = json.loads((output / "train.json").read_text(encoding="utf-8"))
    return {"wall_s": float(costs["elapsed_s"]), "cpu_s": float(costs["cpu_s"]), "peak_mb": trained.peak_mb}


def summary(runs: list[dict[str, Any]], examples: int, sides: list[str]) -> list[dict[str, Any]]:
    """Medians per precision and side, and each odqa side's ratio to the anchor."""
    rows = []
    for precision in sorted({r["precision"] for r in runs}):
        median = {side: {key: statistics.median(r[key] for r in runs if r["side"] == side
                                                and r["precision"] == precision)
                         for key in ("wall_s", "cpu_s", "peak_mb")} for side in sides}  # fmt: skip
        speed = {
            side: (examples / median[side]["wall_s"], examples / median[side]["cpu_s"]) for side in sides
        }
        row: dict[str, Any] = {"precision": precision}
        for side in sides:
            row[f"{side} examples/s"] = round(speed[side][0], 2)
            row[f"{side} examples/CPU-s"] = round(speed[side][1], 2)
            row[f"{side} peak MB"] = round(median[side]["peak_mb"])
        for side in sides[:-1]:
            row[f"{side} / anchor, examples/s"] = round(speed[side][0] / speed[ANCHOR][0], 3)
            row[f"{side} / anchor, examples/CPU-s"] = round(speed[side][1] / speed[ANCHOR][1], 3)
        rows.append(row)
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
    parser.add_argument("--bucket-tokens", type=parse_buckets, default=[None], metavar="none|N[,...]",
                        help="odqa sides: none (one padded block) and/or N (length buckets of at most N padded "
                             "tokens; the anchor has none), e.g. none,2048.")  # fmt: skip
    args = parser.parse_args()
    bench = Bench(args.workspace, args.data, heldout_articles=2)
    bench.prepare()
    base = Recipe(steps=args.steps, batch_size=args.batch_size, threads=args.threads)
    odqa_recipes = {odqa_side(tokens): replace(base, bucket_tokens=tokens) for tokens in args.bucket_tokens}
    sides = [*odqa_recipes, ANCHOR]
    runs: list[dict[str, Any]] = []
    loads = [load_average()]
    for repeat in range(args.repeats):
        for precision in args.precisions.split(","):
            for side in sides if repeat % 2 == 0 else reversed(sides):
                name = f"{side}-{precision}-{repeat}"
                if side == ANCHOR:
                    measured = anchor_run(bench, replace(base, amp=precision), name)
                else:
                    measured = odqa_run(bench, replace(odqa_recipes[side], amp=precision), name)
                loads.append(load_average())
                runs.append(
                    {"side": side, "precision": precision, "repeat": repeat, **measured, "load": loads[-1]}
                )
                print(f"{name}: {measured} (load {loads[-1]})", file=sys.stderr, flush=True)
    examples = args.steps * args.batch_size
    table = summary(runs, examples, sides)
    result = {"steps": args.steps, "batch_size": args.batch_size, "threads": args.threads,
              "odqa_bucket_tokens": args.bucket_tokens, "examples": examples,
              "load": [loads[0], loads[-1]], "load_median": statistics.median(loads), "runs": runs,
              "table": table}  # fmt: skip
    chosen = [str(t) for t in args.bucket_tokens if t]
    suffix = f"-buckets{'-'.join(chosen)}" if chosen else ""
    (bench.folder / f"speed{suffix}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(f"load average: start {loads[0]}, median {statistics.median(loads)}, end {loads[-1]}")
    header = list(table[0])
    print("| " + " | ".join(header) + " |\n|" + " --- |" * len(header))
    for row in table:
        print("| " + " | ".join(str(row[h]) for h in header) + " |")


if __name__ == "__main__":
    main()
