"""`odqa train-rounds`: TASER's training recipe (appendix B, after DPR) as one resumable flow.

Round 1 trains on BM25 hard negatives (P1, DPR's recipe) plus in-batch negatives. Every later
round r mines P_r with round r-1's model (its top `mine_depth` minus gold and answer-bearing
passages) and trains from the base checkpoint again on P1 u P_r (single-set) or P_r
(multi-set). After each round the round's model is indexed and evaluated on the `evaluate`
sets (R@K over the whole corpus), and the round's figures go to the terminal, the run's logs
and the `metrics` table (run ``train-rounds:<model id>``, group ``round N``).

Then the hybrid weight is tuned on training questions held out before round 1 (TASER App. D;
never on the evaluation sets), and the last model is evaluated dense and hybrid, beside BM25.

Where things live (see storage/experiments.py): the recipe trains and mines on its own copies
of the training splits (``<split>-fit-<model id>-<key>``, the held-out part
``<split>-tune-<model id>-<key>``; the key hashes the settings), so mined negatives never
leak into the user's split or into another recipe. Round r's model is ``<model id>-round<r>``.

Resuming: a finished round commits its record (stage ``train-rounds:<model id>:round<r>``)
with its metrics in one transaction. The same command after a kill recognises finished rounds
from that record and the registered model and goes on at the first unfinished one, whose own
stages (negatives, training checkpoints, index, runs) resume or no-op as they always do. More
rounds than before continue from the last finished one; other settings start a fresh recipe.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Annotated, Any

import pyarrow as pa
from prefect import flow, task
from pydantic import Field

from ...models.config import CHECKPOINT_ARCHS
from ...models.settings import RetrieverSettings, TrainSettings
from ...pipelines.evaluation.experiment_table import k_order
from ...pipelines.evaluation.metrics import DEFAULT_KS
from ...pipelines.questions.holdout import split_holdout
from ...pipelines.questions.specs import DatasetSpec
from ...storage import Workspace
from ...storage.choices import IndexType, TrainingMode
from ...storage.experiments import (
    RECIPE,
    final_stage,
    fit_split,
    negatives_summary,
    round_model,
    round_stage,
    run_name,
    splits_source,
    splits_stage,
    tune_split,
)
from ...storage.fingerprint import fingerprint
from ...storage.ids import check_model_id
from ...storage.metrics import overall_metrics
from ...storage.model_registry import model_identity, model_is_registered, resolve_model
from ...storage.questions import load_questions, questions_fingerprint
from ...storage.schemas import SCHEMAS
from ..plumbing.bounds import AtLeastOne, BM25Negatives
from ..plumbing.console import tell
from ..plumbing.runtime import stage_logger
from ..plumbing.skip_unchanged import current_fingerprint
from ..stages.bm25 import bm25_index_flow
from ..stages.evaluate import evaluate_flow
from ..stages.index import index_build_flow
from ..stages.mine import mine_flow
from ..stages.negatives import Bm25NegativesReport, bm25_negatives_flow
from ..stages.retrieve import retrieve_flow
from ..stages.train import train_flow
from ..stages.tune_hybrid import tune_hybrid_flow

# --- reports ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingSplit:
    """A training set of the recipe: the user's split and the recipe's copies of it."""

    dataset: str
    split: str
    weight: float
    fit: str  # split name of the copy trained and mined on
    tune: str  # split name of the held-out copy (empty when nothing is held out)
    fit_questions: int
    tune_questions: int


@dataclass(frozen=True)
class Negatives:
    """The hard negatives a round trained on, for one training split."""

    dataset: str
    split: str  # the recipe's copy
    source: str  # "bm25", or the model id that mined them
    questions: int
    mean_per_question: float
    without_negatives: int
    searched: int = 0  # BM25 negatives: questions searched by this round
    reused: int = 0  # BM25 negatives: questions whose negatives an earlier search of the same question found


@dataclass(frozen=True)
class RoundReport:
    round: int
    model_id: str
    negatives_from: str  # "bm25" or the previous round's model id
    negatives: list[Negatives]
    recall: dict[str, dict[str, float]]  # "dataset:split" -> metric -> value, the round's model
    parameters: int
    seconds: float
    resumed: bool = False  # recognised as finished from the workspace, not recomputed

    @classmethod
    def from_record(cls, report: dict[str, Any]) -> RoundReport:
        recall = {name: dict(sorted(values.items(), key=lambda kv: k_order(kv[0])))
                  for name, values in report["recall"].items()}  # the record's JSON sorts keys as text
        values = {**report, "negatives": [Negatives(**n) for n in report["negatives"]], "recall": recall,
                  "resumed": True}  # fmt: skip
        return cls(**values)


@dataclass(frozen=True)
class RetrieverScores:
    """One retriever of the recipe's end on one evaluation set."""

    retriever: str  # "dense", "hybrid" or "bm25"
    run: str
    dataset: str
    split: str
    recall: dict[str, float]


@dataclass(frozen=True)
class RecipeReport:
    model_id: str  # the last round's model
    arch: str
    parameters: int
    splits: list[TrainingSplit]
    rounds: list[RoundReport]
    alpha: float | None  # tuned hybrid weight (None without hybrid)
    tuned_on: list[str]  # the held-out question sets alpha was tuned on
    final: list[RetrieverScores] = field(default_factory=list)

    def runs(self, retriever: str) -> dict[tuple[str, str], str]:
        """(dataset, split) -> run name of one retriever of the recipe's end."""
        return {(s.dataset, s.split): s.run for s in self.final if s.retriever == retriever}

    def headline(self, name: str) -> list[str]:
        """What recipe `name` made, in words (the command line prints these, the run's log ends with them)."""
        lines = [f"train-rounds {name}: {len(self.rounds)} rounds, final model {self.model_id} ({self.parameters:,} parameters)"]
        if self.alpha is not None:
            lines.append(f"hybrid alpha {self.alpha:g}, tuned on held-out {', '.join(self.tuned_on)}")
        return lines

    def score_lines(self) -> list[str]:
        """One line per retriever and evaluation set: its run and R@K."""
        return [f"{s.retriever} on {s.dataset}/{s.split} (run {s.run}): "
                + " ".join(f"{metric} {value:.3f}" for metric, value in s.recall.items()) for s in self.final]  # fmt: skip


# --- the held-out copies -----------------------------------------------------------------------

# What a recipe's copies and rounds depend on of the training questions: every column but
# `positives_from`, which only marks how `positive_ids` (in) came about, so recipes recorded
# before the column existed stay current.
FINGERPRINTED_COLUMNS = [name for name in SCHEMAS["questions"].names if name != "positives_from"]


@task(name="train-rounds-splits")
def derive_splits_task(workspace: str, model_id: str, key: str, dataset: str, split: str, weight: float,
                       holdout: float, seed: int) -> TrainingSplit:  # fmt: skip
    """Write the recipe's copies of one training split (a no-op when they are current)."""
    ws = Workspace.resolve(workspace)
    fit, tune = fit_split(split, model_id, key), tune_split(split, model_id, key)
    stage = splits_stage(model_id, dataset, split)
    stage_fp = fingerprint(stage, questions_fingerprint(ws, dataset, split, FINGERPRINTED_COLUMNS), fit, tune, holdout,
                           seed)  # fmt: skip
    if ws.stage_is_current(stage, stage_fp):
        return TrainingSplit(**ws.stage_record(stage).report)
    parts = split_holdout(load_questions(ws, dataset, split, SCHEMAS["questions"].names), fit, tune, holdout, seed)
    result = TrainingSplit(dataset, split, weight, fit, tune if parts.tune.num_rows else "", parts.fit.num_rows,
                           parts.tune.num_rows)  # fmt: skip
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        tx.replace_source("questions", splits_source(model_id, dataset, split))
        tx.write("questions", pa.concat_tables([parts.fit, parts.tune]), source=splits_source(model_id, dataset, split))
        tx.report = asdict(result)
    return result


# --- one round ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecipePlan:
    """What every step of one recipe call needs (settings resolved, copies made)."""

    workspace: Workspace
    model_id: str
    splits: list[TrainingSplit]
    retriever: RetrieverSettings
    training: TrainSettings
    mining: dict[str, Any]  # mode, depth, count, bm25_negatives
    evaluate: list[tuple[str, str]]
    ks: list[int]
    k: int
    index_type: IndexType
    base_fp: str  # everything a round's model depends on

    @property
    def root(self) -> str:
        return str(self.workspace.root)


def _negatives(plan: RecipePlan, source: str, searches: dict[str, Bm25NegativesReport]) -> list[Negatives]:
    """The negatives of each training copy; for BM25's, how many questions were searched and how
    many reused what a search of the same question found before (another architecture's copy)."""
    found = []
    for s in plan.splits:
        questions, mean, without = negatives_summary(plan.workspace, s.dataset, s.fit)
        search = searches.get(s.fit)
        found.append(Negatives(s.dataset, s.fit, source, questions, round(mean, 3), without,
                               search.searched if search else 0, search.reused if search else 0))  # fmt: skip
    return found


def _evaluate_model(plan: RecipePlan, model: str, retriever: str = "dense") -> list[RetrieverScores]:
    """Runs of a dense or hybrid retriever on the evaluation sets, evaluated into `metrics`."""
    prefix = model if retriever == "dense" else f"{model}-{retriever}"
    scores = []
    for dataset, split in plan.evaluate:
        run = run_name(prefix, dataset, split)
        retrieve_flow(dataset=dataset, split=split, run=run, retriever=retriever, model=model, k=plan.k,
                      index_type=plan.index_type, workspace=plan.root)  # fmt: skip
        evaluate_flow(run=run, ks=plan.ks, workspace=plan.root)
        scores.append(RetrieverScores(retriever, run, dataset, split, _recall(plan.workspace, run, plan.ks)))
    return scores


def _recall(ws: Workspace, run: str, ks: list[int]) -> dict[str, float]:
    figures = overall_metrics(ws, run)
    if figures.num_rows == 0:
        raise ValueError(f"run {run!r} has no metrics; evaluate it first")
    values = dict(zip(figures["metric"].to_pylist(), figures["value"].to_pylist(), strict=True))
    return {f"R@{k}": round(values[f"R@{k}"], 4) for k in ks if f"R@{k}" in values}


def _round_rows(plan: RecipePlan, report: RoundReport) -> list[dict[str, Any]]:
    """The round's `metrics` rows: R@K of its model per evaluation set, its negatives per split."""
    created = datetime.now(timezone.utc)
    config = json.dumps({"model": report.model_id, "negatives_from": report.negatives_from})
    rows = []
    for name, values in report.recall.items():
        dataset, split = name.split(":", 1)
        rows += [{"dataset": dataset, "split": split, "metric": metric, "value": value} for metric, value in values.items()]
    for n in report.negatives:
        rows += [{"dataset": n.dataset, "split": n.split, "metric": "hard_negatives_per_question",
                  "value": n.mean_per_question},
                 {"dataset": n.dataset, "split": n.split, "metric": "questions_without_negatives",
                  "value": float(n.without_negatives)}]  # fmt: skip
    return [{**row, "run": f"{RECIPE}:{plan.model_id}", "group": f"round {report.round}", "created_at": created,
             "config": config} for row in rows]  # fmt: skip


def _run_round(plan: RecipePlan, number: int, stage_fp: str) -> RoundReport:
    """Negatives (BM25's, or mined with the previous round's model), training, index, evaluation;
    then the round's record and metrics rows in one commit."""
    started = time.perf_counter()
    searches: dict[str, Bm25NegativesReport] = {}
    if number == 1:
        source = "bm25"
        bm25_index_flow(workspace=plan.root)
        for s in plan.splits:
            searches[s.fit] = bm25_negatives_flow(dataset=s.dataset, split=s.fit, count=plan.mining["bm25_negatives"],
                                                  workspace=plan.root)  # fmt: skip
    else:
        source = round_model(plan.model_id, number - 1)
        for s in plan.splits:
            mine_flow(model=source, dataset=s.dataset, split=s.fit, mode=plan.mining["mode"],
                      depth=plan.mining["depth"], count=plan.mining["count"], index_type=plan.index_type,
                      workspace=plan.root)  # fmt: skip
    negatives = _negatives(plan, source, searches)
    model = round_model(plan.model_id, number)
    trained = train_flow(model_id=model, train=[f"{s.dataset}:{s.fit}:{s.weight:g}" for s in plan.splits],
                         retriever=plan.retriever, training=plan.training, workspace=plan.root)  # fmt: skip
    index_build_flow(model=model, index_type=plan.index_type, workspace=plan.root)
    scores = _evaluate_model(plan, model)
    report = RoundReport(number, model, source, negatives, {f"{s.dataset}:{s.split}": s.recall for s in scores},
                         int(trained.parameters), round(time.perf_counter() - started, 1))  # fmt: skip
    stage = round_stage(plan.model_id, number)
    with plan.workspace.transaction(stage, fingerprint=stage_fp) as tx:
        tx.replace_source("metrics", stage)
        tx.write("metrics", _round_rows(plan, report), source=stage)
        tx.report = asdict(report)
    return report


def round_line(report: RoundReport, rounds: int) -> str:
    """One terminal line per round: what it trained on and how its model retrieves."""
    what = "BM25 negatives" if report.negatives_from == "bm25" else f"negatives mined by {report.negatives_from}"
    mean = ", ".join(f"{n.mean_per_question:g}" for n in report.negatives)
    reused = sum(n.reused for n in report.negatives)
    reuse = f"; {reused} questions' reused from an earlier search of the same question" if reused else ""
    recall = "; ".join(f"{name} " + " ".join(f"{m} {v:.3f}" for m, v in values.items())
                       for name, values in report.recall.items())  # fmt: skip
    status = "done before (recognised from the workspace)" if report.resumed else f"{report.seconds:.0f}s"
    return (f"round {report.round}/{rounds}: {report.model_id} on {what} ({mean} per question{reuse}); "
            f"{recall} [{status}]")  # fmt: skip


# --- the end: hybrid weight and final figures ----------------------------------------------------


def _dense_scores(plan: RecipePlan, last: RoundReport) -> list[RetrieverScores]:
    """The last model on the evaluation sets: the figures its round recorded when they cover
    every set and cut-off asked now, else its runs (made or found current) and evaluations."""
    wanted = [f"R@{k}" for k in plan.ks]
    recorded = [last.recall.get(f"{dataset}:{split}", {}) for dataset, split in plan.evaluate]
    if all(set(wanted) <= set(values) for values in recorded):
        return [RetrieverScores("dense", run_name(last.model_id, dataset, split), dataset, split,
                                {m: values[m] for m in wanted})
                for (dataset, split), values in zip(plan.evaluate, recorded, strict=True)]  # fmt: skip
    return _evaluate_model(plan, last.model_id)


def _bm25_scores(plan: RecipePlan) -> list[RetrieverScores]:
    scores = []
    for dataset, split in plan.evaluate:
        run = run_name("bm25", dataset, split)
        retrieve_flow(dataset=dataset, split=split, run=run, k=plan.k, workspace=plan.root)
        evaluate_flow(run=run, ks=plan.ks, workspace=plan.root)
        scores.append(RetrieverScores("bm25", run, dataset, split, _recall(plan.workspace, run, plan.ks)))
    return scores


def _finish(plan: RecipePlan, last: RoundReport, hybrid: bool, bm25: bool,
            tune_k: int) -> tuple[float | None, list[str], list[RetrieverScores]]:  # fmt: skip
    """Tune alpha on the held-out training questions, then the dense, hybrid and BM25 figures on
    the evaluation sets; they go to `metrics` (group ``final <retriever>``)."""
    alpha, tuned_on = None, [f"{s.dataset}:{s.tune}" for s in plan.splits if s.tune]
    scores = _dense_scores(plan, last)
    if hybrid or bm25:
        bm25_index_flow(workspace=plan.root)
    if hybrid:
        alpha = tune_hybrid_flow(model=last.model_id, dev=tuned_on, k=tune_k, index_type=plan.index_type,
                                 workspace=plan.root).alpha  # fmt: skip
        scores += _evaluate_model(plan, last.model_id, retriever="hybrid")
    if bm25:
        scores += _bm25_scores(plan)
    stage = final_stage(plan.model_id)
    values = [(s.retriever, s.run, s.dataset, s.split, sorted(s.recall.items())) for s in scores]
    stage_fp = fingerprint(stage, plan.base_fp, last.model_id, alpha, tuned_on, values)
    if not plan.workspace.stage_is_current(stage, stage_fp):
        created = datetime.now(timezone.utc)
        config = json.dumps({"model": last.model_id, "alpha": alpha, "tuned_on": tuned_on})
        rows = [{"run": f"{RECIPE}:{plan.model_id}", "dataset": s.dataset, "split": s.split, "metric": metric,
                 "value": value, "group": f"final {s.retriever}", "created_at": created, "config": config}
                for s in scores for metric, value in s.recall.items()]  # fmt: skip
        with plan.workspace.transaction(stage, fingerprint=stage_fp) as tx:
            tx.replace_source("metrics", stage)
            tx.write("metrics", rows, source=stage)
            tx.report = {"model": last.model_id, "alpha": alpha, "tuned_on": tuned_on}
    return alpha, tuned_on, scores


# --- the flow ----------------------------------------------------------------------------------


# Always in the recipe's fingerprint (the settings it offered before an option entered only when
# set, `Settings.fingerprint_params`).
FINGERPRINTED = ("arch", "base", "max_steps", "epochs", "batch_size", "lr", "hard_negatives", "routing", "amp", "seed")


@flow(name="train-rounds")
def train_rounds_flow(
    retriever: RetrieverSettings,
    training: TrainSettings,
    train: list[str],
    model_id: str,
    evaluate: list[str],
    rounds: AtLeastOne = 2,
    mode: TrainingMode = "single-set",
    bm25_negatives: BM25Negatives = 1,
    mine_depth: AtLeastOne = 100,
    mine_count: AtLeastOne = 30,
    holdout: Annotated[float, Field(ge=0, lt=1)] = 0.1,
    hybrid: bool = True,
    bm25: bool = True,
    tune_k: AtLeastOne = 20,
    ks: list[AtLeastOne] | None = None,
    k: AtLeastOne = 100,
    index_type: IndexType = "flat",
    workspace: str | None = None,
) -> RecipeReport:
    """TASER's recipe: BM25 negatives, train, mine with the trained model, train again (ROUNDS
    rounds in all); each round's model evaluated on EVALUATE (NAME:SPLIT); then the hybrid weight
    tuned on `holdout` of the TRAIN questions (held out from training) and the last model
    evaluated dense, hybrid and (`bm25`) beside BM25. Resumes at the first unfinished round.

    The Args below (and the field descriptions of the settings, models/settings.py) are also
    the descriptions of the `train-rounds` deployment's Custom run form.

    Args:
        retriever: What every round trains (arch: one trained from a checkpoint, not desire-me or
            rnd-g) and from which checkpoint (a Hugging Face name, a folder or a model id).
        training: How every round trains (its seed also draws the hold-out).
        train: Training question sets as NAME:SPLIT[:WEIGHT], e.g. trex:train.
        model_id: Name of the recipe; round r's model is registered as MODEL_ID-round<r>.
        evaluate: Question sets NAME:SPLIT every round's model is evaluated on (never trained or
            tuned on).
        rounds: Trainings in all: round 1 on BM25 negatives, each later one on negatives mined by
            the previous round's model.
        mode: Rounds after the first train on P1 u P_r (single-set) or on P_r alone (multi-set).
        bm25_negatives: BM25 hard negatives kept per question for round 1 (P1).
        mine_depth: Passages of the previous model's ranking that mining looks at.
        mine_count: Mined negatives kept per question.
        holdout: Fraction of the training questions held out (never trained on) to tune the hybrid
            weight on.
        hybrid: Tune alpha on the held-out questions and evaluate the hybrid with BM25.
        bm25: Also evaluate BM25 on the evaluation sets, for the final table.
        tune_k: Choose the hybrid weight by R@tune_k on the held-out questions.
        ks: Cut-offs of R@K; empty: 1, 5, 20, 100.
        k: Passages retrieved per question for the evaluation runs.
        index_type: FAISS index type of every round's model: flat, hnsw or ivfpq.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
    """
    log = stage_logger()
    ws = Workspace.resolve(workspace)
    specs = [DatasetSpec.parse(s) for s in train]
    evaluated = [(spec.dataset, spec.split) for spec in (DatasetSpec.parse(s, with_weight=False) for s in evaluate)]
    _check(rounds, retriever.arch, specs, evaluated, holdout, hybrid, model_id)
    base, seed = retriever.base, training.seed
    mining = {"mode": mode, "depth": mine_depth, "count": mine_count, "bm25_negatives": bm25_negatives}
    sources = [questions_fingerprint(ws, s.dataset, s.split, FINGERPRINTED_COLUMNS) for s in specs]

    # Everything a round's model depends on; a change gives fresh copies and fresh rounds.
    inputs = (model_identity(resolve_model(ws, base).path), [(s.dataset, s.split, s.weight) for s in specs], mining,
              holdout, index_type, sources, ws.table_version("passages"))  # fmt: skip

    def recipe_fingerprint(earlier: bool) -> str:
        train_args = {**retriever.fingerprint_params(FINGERPRINTED),
                      **training.fingerprint_params(FINGERPRINTED, earlier)}  # fmt: skip
        return fingerprint(RECIPE, model_id, train_args, *inputs)

    # A recipe whose first round was recorded under the defaults of its time goes on with them.
    now, earlier = recipe_fingerprint(False), recipe_fingerprint(True)
    first = round_stage(model_id, 1)
    chosen = current_fingerprint(ws, first, fingerprint(first, now), fingerprint(first, earlier))
    base_fp = now if chosen == fingerprint(first, now) else earlier
    splits = [derive_splits_task(str(ws.root), model_id, base_fp[:8], s.dataset, s.split, s.weight, holdout, seed)
              for s in specs]  # fmt: skip
    plan = RecipePlan(ws, model_id, splits, retriever, training, mining, evaluated, sorted(set(ks or DEFAULT_KS)), k,
                      index_type, base_fp)  # fmt: skip
    reports: list[RoundReport] = []
    for number in range(1, rounds + 1):
        stage = round_stage(model_id, number)
        stage_fp = fingerprint(stage, base_fp)
        if ws.stage_is_current(stage, stage_fp) and model_is_registered(ws, round_model(model_id, number)):
            report = RoundReport.from_record(ws.stage_record(stage).report)
        else:
            report = _run_round(plan, number, stage_fp)
        reports.append(report)
        tell("%s", round_line(report, rounds))
    alpha, tuned_on, final = _finish(plan, reports[-1], hybrid, bm25, tune_k)
    result = RecipeReport(reports[-1].model_id, retriever.arch, reports[-1].parameters, splits, reports, alpha, tuned_on, final)
    log.info("%s", "\n".join(result.headline(model_id) + result.score_lines()))
    return result


def _check(rounds: int, arch: str, specs: list[DatasetSpec], evaluated: list[tuple[str, str]],
           holdout: float, hybrid: bool, model_id: str) -> None:  # fmt: skip
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    if arch not in CHECKPOINT_ARCHS:
        raise ValueError(f"the recipe trains {arch!r} from a checkpoint in every round, which only "
                         f"{', '.join(CHECKPOINT_ARCHS)} do (train {arch} on a recipe's model with odqa train)")
    if not specs:
        raise ValueError("give at least one training set NAME:SPLIT[:WEIGHT]")
    if not evaluated:
        raise ValueError("give at least one evaluation set NAME:SPLIT")
    check_model_id(model_id)
    check_model_id(round_model(model_id, rounds))  # the last round's model is named after it
    overlap = sorted({f"{s.dataset}:{s.split}" for s in specs} & {f"{n}:{s}" for n, s in evaluated})
    if overlap:
        raise ValueError(f"{overlap} is both a training and an evaluation set; evaluate on questions not trained on")
    if hybrid and holdout <= 0:
        raise ValueError("the hybrid weight is tuned on held-out training questions: give a holdout fraction > 0 "
                         "(or no hybrid)")  # fmt: skip
