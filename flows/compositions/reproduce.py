"""`odqa reproduce SETUP`: from an empty workspace to a paper's table, in one resumable flow.

A setup (storage/paper_setups/<name>.yaml, read by storage/setups.py) names the resources, the
question sets, the paper's hyper-parameters and its reported figures. The flow composes the
flows that exist for each step, so each step resumes as it always does:

1. `fetch_flow`: download, verify and import the setup's resources (a finished download is
   recognised from its checksum, a finished import from its fingerprint);
2. with `limit`, copies of the training and evaluation sets holding their first N questions;
3. the training and evaluation the paper's table needs:
   * ``taser-experiment``: `taser_experiment_flow` (DPR and TASER by the recipe in rounds, BM25,
     the hybrids), each finished round recognised from its record;
   * ``dual-encoders``: `dual_encoders_experiment_flow` (every architecture by the recipe);
   * ``desire-me``: `label_domains_flow` (domains from the category graph), `train_flow` (the
     DESIRE-ME head on the frozen base), and BM25, the zero-shot base and DESIRE-ME retrieved and
     evaluated with the qrels metrics;
4. the side-by-side table: every paper figure beside the run's, with the difference, printed and
   committed as the setup's rows of the `reproduction` table (``odqa sql "SELECT * FROM reproduction"``).

The same request again, with nothing committed to the workspace since its table, is recognised
from the table's record and answered from it without visiting the steps.

`max_steps` caps every training (in place of the paper's epochs) and `limit` the questions
trained on and evaluated: a smoke-sized run, marked ``limited`` in the table. A smoke-sized run
also trains one round instead of the paper's, leaves out the hybrids with BM25 (no setup's
figures compare them) and trains only the architectures the paper's figures name (`SMOKE`); the
full run keeps the paper's rounds, hybrids and architectures.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from prefect import flow, task

from ...models.settings import RetrieverSettings, TrainSettings
from ...pipelines.questions.specs import DatasetSpec
from ...pipelines.reproduction import SideBySide, printable, side_by_side
from ...storage import Workspace
from ...storage.choices import SetupName
from ...storage.experiments import run_name
from ...storage.fingerprint import fingerprint
from ...storage.questions import load_questions, questions_fingerprint
from ...storage.reports import Report
from ...storage.reproduction import (
    REPRODUCE,
    first_questions,
    limit_stage,
    limited_split,
    recorded_figures,
    reproduce_stage,
    reproduction_rows,
    run_figure,
)
from ...storage.schemas import SCHEMAS
from ...storage.setups import Setup, load_setup
from ..plumbing.bounds import AtLeastOne
from ..plumbing.console import tell
from ..stages.bm25 import bm25_index_flow
from ..stages.categories import label_domains_flow
from ..stages.evaluate import evaluate_flow
from ..stages.index import index_build_flow
from ..stages.questions import import_questions_flow
from ..stages.retrieve import retrieve_flow
from ..stages.train import train_flow
from .experiments import LABELS, Budget, dual_encoders_experiment_flow, taser_experiment_flow
from .fetch import fetch_flow

EVALUATION_DEPTH = 100  # passages retrieved per question: every figure the setups compare is at <= 100
SMOKE = "one round, no hybrids, only the architectures the figures name"  # what a smoke-sized run leaves out


@dataclass
class ReproduceReport(Report):
    setup: str
    title: str
    limited: bool  # a smoke-sized run (max_steps or limit): not the paper's scale
    figures: list[dict[str, Any]] = field(default_factory=list)  # SideBySide rows
    recognised: bool = False  # the same request's table, nothing committed since: no step visited

    def table(self) -> list[dict[str, str]]:
        return printable([SideBySide(**row) for row in self.figures])


# --- the question sets ------------------------------------------------------------------------


@task(name="reproduce-limit")
def limit_task(workspace: str, dataset: str, split: str, limit: int) -> str:
    """A copy of the split with its first `limit` questions (a no-op when current); its name."""
    ws = Workspace.resolve(workspace)
    name, stage = limited_split(split, limit), limit_stage(dataset, split, limit)
    columns = SCHEMAS["questions"].names
    stage_fp = fingerprint(stage, questions_fingerprint(ws, dataset, split, columns))
    if not ws.stage_is_current(stage, stage_fp):
        rows = first_questions(load_questions(ws, dataset, split, columns), split, limit)
        with ws.transaction(stage, fingerprint=stage_fp) as tx:
            tx.replace_source("questions", stage)
            tx.write("questions", rows, source=stage)
            tx.report = {"dataset": dataset, "split": name, "questions": rows.num_rows}
    return name


def _sets(ws: Workspace, specs: list[str], limit: int | None, with_weight: bool) -> tuple[list[str], dict[str, str]]:
    """The sets as the steps take them (limited copies with `limit`), and limited split -> the paper's."""
    named, original = [], {}
    for text in specs:
        spec = DatasetSpec.parse(text, with_weight=with_weight)
        split = limit_task(str(ws.root), spec.dataset, spec.split, limit) if limit else spec.split
        original[split] = spec.split
        weight = f":{spec.weight:g}" if with_weight else ""
        named.append(f"{spec.dataset}:{split}{weight}")
    return named, original


def _beir_splits(ws: Workspace, setup: Setup, fetched: dict[str, Any]) -> None:
    """The further qrels splits of each fetched BEIR folder (its test split came with the fetch):
    the folder's corpus is already in, so its passages are kept as they are."""
    for resource in fetched["resources"]:
        if resource.get("imported") != "import questions" or not setup.beir_splits:
            continue
        imported = resource["import_report"]
        if imported["format"] != "beir":
            continue
        for split in setup.beir_splits:
            import_questions_flow(fmt="beir", path=resource["path"], dataset=imported["dataset"], split=split,
                                  on_duplicate="keep-existing", workspace=str(ws.root))  # fmt: skip


# --- the kinds of setup -----------------------------------------------------------------------


def _training(setup: Setup, max_steps: int | None, limit: int | None) -> TrainSettings:
    """The paper's training settings; a smoke run caps the steps, and with `limit` questions trains
    in batches of at most half of them (a batch needs that many examples, after the hold-out)."""
    values = dict(setup.training)
    if max_steps:
        values.update(max_steps=max_steps, epochs=None)
    if limit:
        values["batch_size"] = min(values.get("batch_size", TrainSettings.model_fields["batch_size"].default),
                                   max(1, limit // 2))  # fmt: skip
    return TrainSettings(**values)


def _budget(setup: Setup, training: TrainSettings) -> Budget:
    recipe = {k: v for k, v in setup.recipe.items() if k in Budget.model_fields}
    return Budget(training=training, **recipe)


def _experiment_runs(report: Any) -> dict[tuple[str, str, str], str]:
    return {(row.label, row.dataset, row.split): row.run for row in report.rows}


def _taser(ws: Workspace, setup: Setup, base: str, train: list[str], evaluate: list[str],
           training: TrainSettings, smoke: bool) -> dict[tuple[str, str, str], str]:  # fmt: skip
    recipe = setup.recipe
    report = taser_experiment_flow(base=base, train=train, evaluate=evaluate, budget=_budget(setup, training),
                                   name=setup.name, rounds=1 if smoke else recipe.get("rounds", 2),
                                   routing=recipe.get("routing", "det"), holdout=recipe.get("holdout", 0.1),
                                   hybrid=not smoke, workspace=str(ws.root))  # fmt: skip
    return _experiment_runs(report)


def _compared_archs(setup: Setup, smoke: bool) -> list[str] | None:
    """The setup's architectures; in a smoke run only those its figures name (and the reference)."""
    if not smoke or not setup.archs:
        return setup.archs or None
    named = {f.retriever for f in setup.figures}
    return [arch for arch in setup.archs if LABELS.get(arch) in named or arch == setup.reference]


def _dual_encoders(ws: Workspace, setup: Setup, base: str, train: list[str], evaluate: list[str],
                   training: TrainSettings, smoke: bool) -> dict[tuple[str, str, str], str]:  # fmt: skip
    report = dual_encoders_experiment_flow(base=base, train=train, evaluate=evaluate, budget=_budget(setup, training),
                                           archs=_compared_archs(setup, smoke), reference=setup.reference or "sde",
                                           name=setup.name, rounds=1 if smoke else setup.recipe.get("rounds", 1),
                                           workspace=str(ws.root))  # fmt: skip
    return _experiment_runs(report)


def _evaluated(ws: Workspace, prefix: str, dataset: str, split: str, **retriever: Any) -> str:
    run = run_name(prefix, dataset, split)
    retrieve_flow(dataset=dataset, split=split, run=run, k=EVALUATION_DEPTH, workspace=str(ws.root), **retriever)
    evaluate_flow(run=run, workspace=str(ws.root))
    return run


def _desire_me(ws: Workspace, setup: Setup, base: str, train: list[str], evaluate: list[str],
               training: TrainSettings, smoke: bool) -> dict[tuple[str, str, str], str]:  # fmt: skip
    """Domains, the DESIRE-ME head on the frozen base, then BM25, the base and DESIRE-ME evaluated
    (one training, with or without `smoke`)."""
    root = str(ws.root)
    label_domains_flow(workspace=root)
    model = f"{setup.name}-desire-me"
    train_flow(model_id=model, train=train, retriever=RetrieverSettings(arch="desire-me", base=base),
               training=training, workspace=root)  # fmt: skip
    bm25_index_flow(workspace=root)
    index_build_flow(model=base, workspace=root)
    index_build_flow(model=model, workspace=root)
    runs = {}
    for spec in (DatasetSpec.parse(text, with_weight=False) for text in evaluate):
        d, s = spec.dataset, spec.split
        runs[("BM25", d, s)] = _evaluated(ws, "bm25", d, s)
        runs[("Base", d, s)] = _evaluated(ws, f"{setup.name}-base", d, s, retriever="dense", model=base)
        runs[("DESIRE-ME", d, s)] = _evaluated(ws, model, d, s, retriever="dense", model=model)
    return runs


KINDS = {"taser-experiment": _taser, "dual-encoders": _dual_encoders, "desire-me": _desire_me}


# --- the comparison ---------------------------------------------------------------------------


def _request(setup: Setup, max_steps: int | None, limit: int | None, base: str, registry: str | None) -> str:
    """What decides a setup's table: the setup file, the smoke options, the base, the user's registry."""
    own = Path(registry).read_bytes() if registry else b""
    return fingerprint(REPRODUCE, setup.model_dump(), max_steps, limit, base, hashlib.sha256(own).hexdigest())


def _recognised(setup: Setup, recorded: list[dict[str, Any]], limited: bool) -> ReproduceReport:
    order = {(f.retriever, f.metric): i for i, f in enumerate(setup.figures)}
    names = [f.name for f in fields(SideBySide)]
    rows = sorted(recorded, key=lambda row: order.get((row["retriever"], row["metric"]), len(order)))
    return ReproduceReport(setup.name, setup.title, limited, [{n: row[n] for n in names} for row in rows], True)


def _commit(ws: Workspace, setup: Setup, rows: list[SideBySide], limited: bool, request: str) -> None:
    """The setup's rows of the `reproduction` table, replaced in one commit (a no-op when unchanged)."""
    stage = reproduce_stage(setup.name)
    values = [row.as_row() for row in rows]
    stage_fp = fingerprint(stage, values, limited, request)
    if ws.stage_is_current(stage, stage_fp):
        return
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        tx.replace_source("reproduction", stage)
        tx.write("reproduction", reproduction_rows(setup.name, values, limited), source=stage)
        tx.report = {"figures": len(values), "measured": sum(r.measured is not None for r in rows), "limited": limited,
                     "request": request}  # fmt: skip


@flow(name="reproduce")
def reproduce_flow(
    setup: SetupName,
    registry: str | None = None,
    mirror: str | None = None,
    max_steps: AtLeastOne | None = None,
    limit: AtLeastOne | None = None,
    base: str | None = None,
    workspace: str | None = None,
) -> ReproduceReport:
    """A paper's setup end to end: fetch and import its data, train with the paper's
    hyper-parameters (in its rounds), index, evaluate, and set the paper's figures beside the
    run's. Every step resumes: the same call after a kill goes on where it stopped.

    Args:
        setup: The paper setup (`odqa reproduce --list` describes each).
        registry: A resource registry file of your own, in `odqa fetch`'s schema; its names
            replace the built-in ones (a mirror of the papers' files, a miniature).
        mirror: Fetch every https://HOST/PATH from MIRROR/HOST/PATH instead.
        max_steps: Cap every training at this many steps (a smoke run; in place of the paper's epochs).
        limit: Train and evaluate on the first N questions of each set (a smoke run).
        base: Start from this checkpoint instead of the setup's (a local copy of it, when offline).
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
    """
    chosen = load_setup(setup)
    ws = Workspace.resolve(workspace)
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1 question, got {limit}")
    tell("reproduce %s: %s", chosen.name, chosen.title)
    limited = bool(max_steps or limit)
    request = _request(chosen, max_steps, limit, base or chosen.base, registry)
    recorded = recorded_figures(ws, chosen.name, request)
    if recorded is not None:
        tell("reproduce %s: done before (recognised from the workspace): the same request, nothing committed since",
             chosen.name)  # fmt: skip
        return _recognised(chosen, recorded, limited)
    fetched = fetch_flow(names=list(chosen.resources), workspace=str(ws.root), registry=registry or "",
                         mirror=mirror or "", run_import=True)  # fmt: skip
    _beir_splits(ws, chosen, fetched)
    train, _ = _sets(ws, chosen.train, limit, with_weight=True)
    evaluate, original = _sets(ws, chosen.evaluate, limit, with_weight=False)
    runs = KINDS[chosen.kind](ws, chosen, base or chosen.base, train, evaluate, _training(chosen, max_steps, limit),
                              limited)  # fmt: skip
    runs = {(label, dataset, original.get(split, split)): run for (label, dataset, split), run in runs.items()}

    def figure_of(run: str, dataset: str, split: str, metric: str) -> float | None:
        asked = limited_split(split, limit) if limit else split
        return run_figure(ws, run, dataset, asked, metric)

    rows = side_by_side(chosen.figures, runs, figure_of)
    _commit(ws, chosen, rows, limited, request)
    report = ReproduceReport(chosen.name, chosen.title, limited, [row.as_row() for row in rows])
    tell("reproduce %s: %d paper figures, %d measured%s", chosen.name, len(rows),
         sum(r.measured is not None for r in rows), f" (smoke-sized run: {SMOKE}; not the paper's scale)" if limited else "")  # fmt: skip
    return report
