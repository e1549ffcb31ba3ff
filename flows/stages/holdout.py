"""`odqa questions holdout`: a training split carved into the questions a model trains on and
held-out ones to tune on, as `odqa train-rounds` and `odqa experiment` do for themselves.

TASER tunes its hybrid weight alpha on held-out training questions (App. D): tuning it on the
set the figures are reported on would report an optimistic number. This verb makes that split
for the single-step verbs: ``<split>-fit`` (train on it) and ``<split>-tune`` (give it to
`odqa tune-hybrid`), copies of the split's questions with their positives and hard negatives
(`pipelines.questions.holdout`); the split itself stays as it was. Which questions are held out
depends only on their ids and the seed. Running it again on unchanged questions is a no-op; on
changed ones it replaces its earlier copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from prefect import flow

from ...pipelines.questions.holdout import split_holdout
from ...storage import Workspace
from ...storage.fingerprint import fingerprint
from ...storage.questions import known_splits, load_questions, questions_fingerprint
from ...storage.reports import Report
from ...storage.schemas import SCHEMAS
from ..plumbing.bounds import Seed, Share
from ..plumbing.report_text import log_report
from ..plumbing.skip_unchanged import finished_report

DEFAULT_FRACTION = 0.1  # as `odqa train-rounds` and the experiments hold out


@dataclass
class HoldoutReport(Report):
    dataset: str
    split: str
    fraction: float
    seed: int
    fit_split: str  # the questions trained on
    fit_questions: int
    tune_split: str  # the held-out questions
    tune_questions: int


def holdout_stage(dataset: str, split: str) -> str:
    """The ledger name (and the questions' source) of a split's held-out copies."""
    return f"holdout:{dataset}:{split}"


def _check_targets(ws: Workspace, dataset: str, split: str, targets: list[str]) -> None:
    """The copies may go to `targets`: a split that holds questions this holdout did not make is refused."""
    record = ws.stage_record(holdout_stage(dataset, split))
    ours = {record.report.get("fit_split"), record.report.get("tune_split")} if record else set()
    existing = set(known_splits(ws))
    for target in targets:
        if target == split:
            raise ValueError(f"the held-out copies of {dataset}:{split} need split names of their own, not {split!r}")
        if (dataset, target) in existing and target not in ours:
            held = load_questions(ws, dataset, target, ["question_id"]).num_rows
            raise ValueError(f"{dataset}:{target} already holds {held:,} questions that no holdout of {dataset}:{split} "
                             "made; choose other names (--fit-split, --tune-split)")  # fmt: skip


@flow(name="holdout")
def holdout_flow(dataset: str, split: str, fraction: Share = DEFAULT_FRACTION, seed: Seed = 0,
                 fit_split: str | None = None, tune_split: str | None = None,
                 workspace: str | None = None) -> HoldoutReport:  # fmt: skip
    """Hold out `fraction` of DATASET:SPLIT's questions to tune on; train on the rest.

    Args:
        dataset: Dataset of the training questions.
        split: The training split, e.g. train; it stays as it was.
        fraction: Share of the questions held out (0 < fraction < 1); the rest are trained on.
        seed: Which questions are held out depends on their ids and this seed.
        fit_split: Name of the split trained on; empty: <split>-fit.
        tune_split: Name of the held-out split (tune the hybrid on it); empty: <split>-tune.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"the held-out fraction must be between 0 and 1 (exclusive), got {fraction}")
    ws = Workspace.resolve(workspace)
    fit, tune = fit_split or f"{split}-fit", tune_split or f"{split}-tune"
    if fit == tune:
        raise ValueError(f"the trained-on and held-out splits need two names, got {fit!r} twice")
    columns = SCHEMAS["questions"].names
    stage = holdout_stage(dataset, split)
    stage_fp = fingerprint(stage, questions_fingerprint(ws, dataset, split, columns), fraction, seed, fit, tune)
    report = finished_report(ws, stage, stage_fp, HoldoutReport, "same questions, fraction, seed and names")
    if report is None:
        questions = load_questions(ws, dataset, split, columns)
        if not questions.num_rows:
            raise ValueError(f"{dataset}:{split} has no questions to hold out (odqa import questions first)")
        _check_targets(ws, dataset, split, [fit, tune])
        parts = split_holdout(questions, fit, tune, fraction, seed)
        with ws.transaction(stage, fingerprint=stage_fp) as tx:
            tx.replace_source("questions", stage)
            tx.write("questions", pa.concat_tables([parts.fit, parts.tune]), source=stage)
            report = HoldoutReport(dataset=dataset, split=split, fraction=fraction, seed=seed, fit_split=fit,
                                   fit_questions=parts.fit.num_rows, tune_split=tune,
                                   tune_questions=parts.tune.num_rows)  # fmt: skip
            tx.report = report.ledger()
    log_report(stage, report)
    return report
