"""`odqa experiment`: the papers' comparisons, each one flow over any data the workspace holds.

* ``dual-encoders`` (dual-encoder architectures paper, Tables 2-3): SDE, ADE, ADE-STE, ADE-FTE,
  ADE-SPL and TASER beside them, trained from one base with one budget;
* ``taser`` (TASER paper, Tables 1-2): TASER vs DPR vs BM25 vs the hybrids with BM25, and the
  parameter ratio TASER/DPR.

Every dense retriever is trained by the TASER recipe (`train_rounds_flow`: BM25 negatives, then
as many mining rounds as asked) on the same training questions, so only the architecture
differs; the BM25 negatives of those questions are searched once and reused by every retriever
(`flows.stages.negatives`). The runs on each evaluation set are compared by `compare_flow` (paired two-sided
t-tests, Bonferroni-corrected over all pairs); the result is one table with significance marks
and parameter counts, a bar chart in ``plots/experiment-<name>.png``, Prefect artifacts (the
table and the tests), and `metrics` rows (run ``experiment:<name>``, group = retriever, or
"A vs B" for a test). Finished trainings are recognised from the workspace, so re-running an
experiment, or running it with one more architecture, trains only what is new.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from prefect import flow
from pydantic import BaseModel, Field

from ...models.config import CheckpointArch, Routing
from ...models.settings import RetrieverSettings, TrainSettings
from ...pipelines.evaluation.experiment_table import (
    SIGNIFICANT_MARK,
    Comparison,
    Entry,
    ExperimentRow,
    comparisons_of,
    display_rows,
    experiment_rows,
    metric_rows,
    parameter_ratio,
    render_experiment_plot,
    significance_rows,
)
from ...pipelines.evaluation.metrics import DEFAULT_KS
from ...storage import Workspace
from ...storage.atomic import atomic_write_bytes
from ...storage.choices import IndexType, TrainingMode
from ...storage.experiments import experiment_model, experiment_plot, experiment_stage
from ...storage.fingerprint import fingerprint
from ..plumbing.artifacts import publish_table
from ..plumbing.bounds import AtLeastOne, Share
from .compare import compare_flow
from .recipe import RecipeReport, train_rounds_flow

DUAL_ENCODER_ARCHS = ["sde", "ade", "ade-ste", "ade-fte", "ade-spl", "taser"]
LABELS = {"sde": "SDE", "ade": "ADE", "dpr": "DPR", "ade-ste": "ADE-STE", "ade-fte": "ADE-FTE", "ade-spl": "ADE-SPL",
          "taser": "TASER", "taser-shared": "TASER-shared"}  # fmt: skip
BM25_LABEL = "BM25"


@dataclass(frozen=True)
class ExperimentReport:
    name: str
    title: str
    reference: str  # the label every retriever is tested against
    metrics: list[str]  # the R@K columns of the table
    rows: list[ExperimentRow]
    tests: list[Comparison]  # every pairwise test of `compare`
    parameter_ratios: dict[str, float]  # "TASER/DPR" -> ratio
    plot: str
    recall_plots: list[str]  # compare's R@K curves, one per evaluation set
    recipes: list[RecipeReport] = field(default_factory=list)

    def table(self) -> list[dict[str, Any]]:
        """The printable table (metrics marked where significantly different from the reference)."""
        return display_rows(self.rows, self.metrics, self.reference)

    def significance(self) -> list[dict[str, Any]]:
        return significance_rows(self.rows, self.metrics)

    def bm25_searches(self) -> tuple[int, int]:
        """(questions searched, questions reused) by the BM25 negatives of every retriever's first
        round: the retrievers train on the same questions, so one search serves them all."""
        first = [n for recipe in self.recipes for n in recipe.rounds[0].negatives if n.source == "bm25"]
        return sum(n.searched for n in first), sum(n.reused for n in first)


def _label(arch: str) -> str:
    return LABELS.get(arch, arch.upper())


def _recipe(ws: Workspace, name: str, arch: str, settings: dict[str, Any], routing: Routing = "det",
            **recipe: Any) -> RecipeReport:  # fmt: skip
    """The recipe of one architecture, trained from the experiment's base with its settings."""
    shared = {k: v for k, v in settings.items() if k != "base"}
    return train_rounds_flow(retriever=RetrieverSettings(arch=arch, base=settings["base"], routing=routing),
                             model_id=experiment_model(name, arch), workspace=str(ws.root), **shared, **recipe)  # fmt: skip


def _dense_entries(report: RecipeReport, label: str, retriever: str = "dense") -> dict[tuple[str, str], Entry]:
    return {where: Entry(label, run, report.model_id, report.parameters)
            for where, run in report.runs(retriever).items()}  # fmt: skip


def _compare(ws: Workspace, name: str, title: str, reference: str, entries: dict[tuple[str, str], list[Entry]],
             ks: list[int], alpha: float, ratios: dict[str, float], recipes: list[RecipeReport],
             config: dict[str, Any]) -> ExperimentReport:  # fmt: skip
    """Compare the entries' runs per evaluation set, then table, plot, metrics rows, artifacts."""
    rows: list[ExperimentRow] = []
    tests: list[Comparison] = []
    recall_plots = []
    for (dataset, split), here in entries.items():
        compared = compare_flow(runs=[e.run for e in here], ks=ks, alpha=alpha, workspace=str(ws.root))
        found = comparisons_of(compared.comparisons, {e.run: e.label for e in here})
        tests += found
        rows += experiment_rows(here, reference, dataset, split, compared.means, found)
        if compared.plot:
            recall_plots.append(compared.plot)
    metrics = [f"R@{k}" for k in ks]
    plot = experiment_plot(ws, name)
    atomic_write_bytes(plot, render_experiment_plot(rows, metrics, title, reference))
    stage = experiment_stage(name)
    values = metric_rows(stage, rows, tests)
    stage_fp = fingerprint(stage, values, config)
    if not ws.stage_is_current(stage, stage_fp):
        created, settings = datetime.now(timezone.utc), json.dumps(config, sort_keys=True, default=str)
        with ws.transaction(stage, fingerprint=stage_fp) as tx:
            tx.replace_source("metrics", stage)
            tx.write("metrics", [{**v, "created_at": created, "config": settings} for v in values], source=stage)
            tx.report = {"retrievers": sorted({r.label for r in rows}), "metrics_rows": len(values), **ratios}
    report = ExperimentReport(name, title, reference, metrics, rows, tests, ratios, str(plot), recall_plots, recipes)
    description = f"{title}: R@K ({SIGNIFICANT_MARK} = significantly different from {reference}, paired t-test, Bonferroni)"
    publish_table(f"experiment-{name}", description, report.table(), [str(plot), *recall_plots])
    publish_table(f"experiment-{name}-tests", f"{title}: paired t-tests against {reference}", report.significance())
    return report


class Budget(BaseModel):
    """How every retriever of an experiment is trained: the same for all of them (a form in the UI)."""

    training: TrainSettings = Field(description="How every round trains (models/settings.py); its seed also draws "
                                    "the hold-out")  # fmt: skip
    mode: TrainingMode = Field(default="single-set", description="Rounds after the first: single-set (P1 u P_r) or "
                               "multi-set")  # fmt: skip
    bm25_negatives: int = Field(default=1, ge=1, le=30, description="BM25 hard negatives per question (P1)")
    mine_depth: int = Field(default=100, ge=1, description="Ranking depth mining looks at")
    mine_count: int = Field(default=30, ge=1, description="Mined negatives kept per question")
    index_type: IndexType = Field(default="flat", description="FAISS index type: flat, hnsw or ivfpq")


def _settings(base: str, train: list[str], evaluate: list[str], ks: list[int], rounds: int,
              budget: Budget) -> dict[str, Any]:  # fmt: skip
    """The recipe parameters every retriever of an experiment shares (and the experiment's record)."""
    return {"base": base, "train": train, "evaluate": evaluate, "ks": ks, "rounds": rounds, **budget.model_dump()}


@flow(name="experiment-dual-encoders")
def dual_encoders_experiment_flow(
    base: str,
    train: list[str],
    evaluate: list[str],
    budget: Budget,
    archs: list[str] | None = None,
    reference: CheckpointArch = "sde",
    name: str = "dual-encoders",
    rounds: AtLeastOne = 1,
    ks: list[AtLeastOne] | None = None,
    alpha: Share = 0.05,
    workspace: str | None = None,
) -> ExperimentReport:
    """The dual-encoder paper's comparison: each of ARCHS (default SDE, ADE, ADE-STE, ADE-FTE,
    ADE-SPL, TASER) trained from BASE on TRAIN with one budget, evaluated on EVALUATE, tested
    against REFERENCE.

    Args:
        base: Starting checkpoint of every retriever: a Hugging Face name, a folder or a model id.
        train: Training question sets as NAME:SPLIT[:WEIGHT], the same for every retriever.
        evaluate: Question sets NAME:SPLIT the retrievers are compared on (never trained on).
        budget: How every retriever is trained (steps, batch, learning rate, precision, mining).
        archs: Architectures to compare; empty: sde, ade, ade-ste, ade-fte, ade-spl and taser.
        reference: The architecture every other one is tested against.
        name: Name of the experiment: its models, runs, plot and metrics rows carry it.
        rounds: Trainings per retriever (round 1 on BM25 negatives, later ones on mined negatives).
        ks: Cut-offs of R@K; empty: 1, 5, 20, 100.
        alpha: Significance level of the paired t-tests (Bonferroni-corrected).
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
    """
    ws = Workspace.resolve(workspace)
    archs = list(archs or DUAL_ENCODER_ARCHS)
    if reference not in archs:
        raise ValueError(f"the reference {reference!r} must be one of the archs {archs}")
    ks = sorted(set(ks or DEFAULT_KS))
    settings = _settings(base, train, evaluate, ks, rounds, budget)
    recipes = [_recipe(ws, name, arch, settings, holdout=0.0, hybrid=False, bm25=False) for arch in archs]
    entries: dict[tuple[str, str], list[Entry]] = {}
    for arch, recipe in zip(archs, recipes, strict=True):
        for where, entry in _dense_entries(recipe, _label(arch)).items():
            entries.setdefault(where, []).append(entry)
    all_entries = [e for here in entries.values() for e in here]
    ratios = {f"{_label(a)}/{_label(reference)}": round(parameter_ratio(all_entries, _label(a), _label(reference)), 4)
              for a in archs if a != reference}  # fmt: skip
    return _compare(ws, name, "Dual-encoder architectures", _label(reference), entries, ks, alpha, ratios, recipes,
                    {**settings, "archs": archs, "reference": reference, "alpha": alpha})  # fmt: skip


@flow(name="experiment-taser")
def taser_experiment_flow(
    base: str,
    train: list[str],
    evaluate: list[str],
    budget: Budget,
    name: str = "taser",
    rounds: AtLeastOne = 2,
    routing: Routing = "det",
    holdout: Share = 0.1,
    hybrid: bool = True,
    ks: list[AtLeastOne] | None = None,
    alpha: Share = 0.05,
    workspace: str | None = None,
) -> ExperimentReport:
    """The TASER paper's comparison: TASER and DPR trained by the same recipe (ROUNDS rounds of
    mining), BM25, and (`hybrid`) each dense model's hybrid with BM25 (alpha tuned on held-out
    training questions), tested against DPR; with the parameter ratio TASER/DPR.

    Args:
        base: Starting checkpoint of every retriever: a Hugging Face name, a folder or a model id.
        train: Training question sets as NAME:SPLIT[:WEIGHT], the same for every retriever.
        evaluate: Question sets NAME:SPLIT the retrievers are compared on (never trained on).
        budget: How every retriever is trained (steps, batch, learning rate, precision, mining).
        name: Name of the experiment: its models, runs, plot and metrics rows carry it.
        rounds: Trainings per retriever (round 1 on BM25 negatives, later ones on mined negatives).
        routing: TASER expert routing: det, seq or tok.
        holdout: Fraction of the training questions held out to tune each hybrid's weight on.
        hybrid: Also tune and evaluate each dense model's hybrid with BM25 (off: no hold-out either).
        ks: Cut-offs of R@K; empty: 1, 5, 20, 100.
        alpha: Significance level of the paired t-tests (Bonferroni-corrected).
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
    """
    ws = Workspace.resolve(workspace)
    ks = sorted(set(ks or DEFAULT_KS))
    settings = {**_settings(base, train, evaluate, ks, rounds, budget), "holdout": holdout if hybrid else 0.0}
    dpr = _recipe(ws, name, "dpr", settings, hybrid=hybrid)
    taser = _recipe(ws, name, "taser", settings, hybrid=hybrid, routing=routing)
    dpr_label, taser_label = _label("dpr"), _label("taser")
    bm25 = {where: Entry(BM25_LABEL, run) for where, run in taser.runs("bm25").items()}
    columns = [bm25, _dense_entries(dpr, dpr_label), _dense_entries(taser, taser_label)]
    if hybrid:
        columns[2:2] = [_dense_entries(dpr, f"{dpr_label} + BM25", "hybrid")]
        columns.append(_dense_entries(taser, f"{taser_label} + BM25", "hybrid"))
    entries = {where: [column[where] for column in columns] for where in bm25}
    ratio = parameter_ratio([e for here in entries.values() for e in here], taser_label, dpr_label)
    return _compare(ws, name, "TASER vs DPR vs BM25", dpr_label, entries, ks, alpha,
                    {f"{taser_label}/{dpr_label}": round(ratio, 4)}, [dpr, taser],
                    {**settings, "routing": routing, "alpha": alpha})  # fmt: skip
