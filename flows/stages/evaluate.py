"""`odqa evaluate`: a run's R@K (micro, per relation, macro) and qrels metrics into `metrics`.

A run is evaluated on every dataset split its questions belong to, over all questions of that
split (`pipelines.evaluation.run_scores`). Qrels metrics use the `qrels` table when it has
judgments for the split, else the questions' `positive_ids` (binary). Answers are matched in the
texts of the passages the run's ids name (an import since may have changed them): those it was
retrieved from or, for an imported run, those its ids were checked against at its import; or in
the current passages when asked. The plot of R@K against K goes to `<workspace>/plots/`, and an
artifact with the figures to the flow run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from prefect import flow, task

from ...pipelines.evaluation.answers import match_mode
from ...pipelines.evaluation.metrics import (
    DEFAULT_KS,
    derived_judgments,
    metrics_table,
    qrels_from_questions,
    render_recall_plot,
)
from ...pipelines.evaluation.run_scores import SplitScores, score_split
from ...storage import Workspace
from ...storage.atomic import atomic_write_bytes
from ...storage.choices import MATCH_CHOICES, RUN_PASSAGES, AnswerMatch, RunPassages
from ...storage.fingerprint import fingerprint
from ...storage.metrics import overall_metrics
from ...storage.passages import passage_texts
from ...storage.questions import EVALUATION_COLUMNS, load_questions, questions_with_ids, relevance_judgments
from ...storage.read_leases import TableVersionGone
from ...storage.reports import Report
from ...storage.runs import evaluation_source, read_run, run_origin, run_record_stage
from ...storage.tables import KEEP_SNAPSHOTS
from ..plumbing.artifacts import publish_evaluation
from ..plumbing.bounds import AtLeastOne
from ..plumbing.report_text import log_report
from ..plumbing.skip_unchanged import finished_report


def split_summary(split: dict[str, Any]) -> str:
    """What one dataset split was scored on, as a sentence (the report keeps the figures as a dict)."""
    line = f"{split['questions']:,} questions"
    if "questions_with_answers" in split:
        line += f", {split['questions_with_answers']:,} with answers (answer match)"
    if "questions_judged" in split:
        derived = "".join(f"; {count:,} of them derived from their answers by {origin} (odqa positives)"
                          for origin, count in split.get("qrels_derived", {}).items())  # fmt: skip
        line += f", {split['questions_judged']:,} judged (relevance from {split['qrels_source']}{derived})"
    if split.get("passages_missing"):
        line += f"; {split['passages_missing']:,} retrieved passages missing from the passages table"
    return line


@dataclass
class EvaluateReport(Report):
    run: str
    splits: list[dict[str, Any]]
    metrics: int
    plot: str | None
    passages_version: str = ""  # the passages whose texts the answers were matched in
    passages: str = ""  # why those (the run's, or the current ones)

    def as_figures(self) -> dict[str, Any]:
        """Each scored split as a sentence of its own (`dataset/split: ...`), not as its dict."""
        figures = super().as_figures()
        figures.pop("splits")
        scored = {f"{s['dataset']}/{s['split']}": split_summary(s) for s in self.splits}
        return {"run": figures.pop("run"), **scored, **figures}


def split_judgments(ws: Workspace, dataset: str, split: str,
                    questions: pa.Table) -> tuple[dict[str, dict[str, int]], str]:  # fmt: skip
    """The judgments a split's qrels metrics are scored against, and their source: the `qrels`
    table's (graded) rows when it judges the split, else the `questions`' `positive_ids` (score 1).
    `odqa export beir` writes exactly these."""
    judged = relevance_judgments(ws, dataset, split)
    return (judged, "qrels") if judged else (qrels_from_questions(questions), "positive_ids")


@dataclass(frozen=True)
class ScoringPassages:
    """The passages version whose texts a run's answers are matched in, and why that one."""

    version: str
    chosen: str
    imported: bool = False  # the version is the one an imported run's ids were checked against

    @property
    def origin(self) -> str:
        return _origin_words(self.imported)


def _origin_words(imported: bool) -> str:
    """How a run came to name its passages, for the messages that cite them."""
    return "imported against" if imported else "retrieved from"


def scoring_passages(ws: Workspace, run: str, passages: RunPassages = "run") -> ScoringPassages:
    """The passages a run is scored in: those its ids name (`run`: the passages it was retrieved
    from, or those an imported run was checked against at its import), else (`current`, or a run
    imported before imports recorded them) the current ones."""
    if passages not in RUN_PASSAGES:
        raise ValueError(f"passages must be one of {RUN_PASSAGES}, got {passages!r}")
    current = ws.table_version("passages")
    if passages == "current":
        return ScoringPassages(current, "the current passages, as asked")
    origin = run_origin(ws, run)
    if origin.passages_version is None:
        return ScoringPassages(current, "the current passages (an imported run: its passages are unknown)")
    now = "the current ones" if origin.passages_version == current else f"the current ones are {current}"
    return ScoringPassages(origin.passages_version, f"the passages the run was {_origin_words(origin.imported)} ({now})",
                           origin.imported)  # fmt: skip


def run_texts(ws: Workspace, run: str, passage_ids: list[str], passages: ScoringPassages) -> tuple[dict[str, str], int]:
    """The texts of a run's passages in `passages`, and how many are missing; passages no longer
    on disk are an error saying how to score the run anyway."""
    try:
        return passage_texts(ws, passage_ids, with_title=False, version=passages.version)
    except TableVersionGone:
        again = ("Import the run again (its ids are then checked against the current passages)" if passages.imported
                 else "Retrieve the run again")  # fmt: skip
        raise TableVersionGone(
            f"run {run!r} was {passages.origin} passages {passages.version}, whose files are no longer in {ws.root}: "
            f"the passages are now {ws.table_version('passages')}, and odqa keeps an older version's files only "
            f"through {KEEP_SNAPSHOTS} later commits (imports, runs, evaluations) or while a kept release serves it. "
            f"{again}, or match its answers in the current passages' texts: odqa evaluate --run {run} "
            "--passages current"
        ) from None  # fmt: skip


def score_run(ws: Workspace, run: str, ks: tuple[int, ...], match: str, passages: ScoringPassages
              ) -> list[SplitScores]:  # fmt: skip
    """Score a run on every dataset split its questions come from, its answers matched in the
    texts of `passages`."""
    rows = read_run(ws, run)
    qids = sorted(set(rows.column("question_id").to_pylist()))
    touched = questions_with_ids(ws, qids, ["dataset", "split"])
    pairs = sorted(set(zip(touched.column("dataset").to_pylist(), touched.column("split").to_pylist(), strict=True)))
    if not pairs:
        raise ValueError(f"none of the {len(qids)} question ids of run {run!r} is in the questions table")
    texts, missing = run_texts(ws, run, rows.column("passage_id").to_pylist(), passages)
    results = []
    for dataset, split in pairs:
        questions = load_questions(ws, dataset, split, EVALUATION_COLUMNS)
        qrels, source = split_judgments(ws, dataset, split, questions)
        scores = score_split(rows, questions, dataset=dataset, split=split, ks=ks, mode=match_mode(dataset, match),
                             passage_texts=texts, qrels=qrels, qrels_source=source, passages_missing=missing)  # fmt: skip
        if source == "positive_ids" and (derived := derived_judgments(questions)):
            scores.info["qrels_derived"] = derived  # judged questions whose positives came from a retriever
        results.append(scores)
    return results


def recall_plot(ws: Workspace, name: str, title: str, scored: list[tuple[str, SplitScores]]) -> str | None:
    """The R@K-against-K plot of the (run, scored split) pairs that have answers (None when none has)."""
    curves = {f"{run} ({s.dataset}/{s.split})": s.curve for run, s in scored if s.curve is not None}
    if not curves:
        return None
    path = ws.plot_path(name)
    atomic_write_bytes(path, render_recall_plot(curves, title=title))
    return str(path)


@task(name="evaluate-run")
def evaluate_task(workspace: str, run: str, ks: list[int], match: str, passages: ScoringPassages,
                  stage_fp: str) -> EvaluateReport:  # fmt: skip
    ws = Workspace.resolve(workspace)
    results = score_run(ws, run, tuple(ks), match, passages)
    record = ws.stage_record(run_record_stage(run))
    made_by = record.report if record else {}
    created = datetime.now(timezone.utc)
    tables, splits = [], []
    for scores in results:
        config = json.dumps({"run": made_by, "ks": ks, "match": scores.match, "passages_version": passages.version,
                             "passages": passages.chosen, **scores.info}, sort_keys=True, default=str)  # fmt: skip
        table = metrics_table(scores.values, run=run, dataset=scores.dataset, split=scores.split)
        table = table.append_column("created_at", pa.array([created] * table.num_rows, pa.timestamp("us", tz="UTC")))
        tables.append(table.append_column("config", pa.array([config] * table.num_rows, pa.string())))
        splits.append({"dataset": scores.dataset, "split": scores.split, "questions": scores.questions, **scores.info})
    plot = recall_plot(ws, f"recall-{run}", f"Top-K retrieval accuracy of {run}", [(run, s) for s in results])
    metrics = pa.concat_tables(tables)
    with ws.transaction(evaluate_stage(run), fingerprint=stage_fp) as tx:
        tx.replace_source("metrics", evaluation_source(run))
        tx.write("metrics", metrics, source=evaluation_source(run))
        report = EvaluateReport(run=run, splits=splits, metrics=metrics.num_rows, plot=plot,
                                passages_version=passages.version, passages=passages.chosen)  # fmt: skip
        tx.report = report.ledger()
    return report


def evaluate_stage(run: str) -> str:
    """The ledger name of a run's evaluation (the pipeline checks it is still there)."""
    return f"evaluate:{run}"


@flow(name="evaluate")
def evaluate_flow(run: str, ks: list[AtLeastOne] | None = None, match: AnswerMatch = "auto",
                  passages: RunPassages = "run", workspace: str | None = None) -> EvaluateReport:  # fmt: skip
    """Evaluate RUN: answer-based R@K (micro, per relation, macro) and qrels metrics into `metrics`.

    Args:
        run: Name of a retrieval run in the `runs` table, e.g. bm25-trex-test.
        ks: Cut-offs K of R@K; empty: 1, 5, 20 and 100.
        match: How an answer matches a passage: auto (DPR's regex mode for CuratedTREC, whose
            answers are patterns, else string), string (DPR's normalized token match) or regex.
        passages: Whose texts answers are matched in: run (the passages the run was retrieved
            from, which an import since may have changed) or current (today's passages).
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
    """
    ks = sorted(set(ks or DEFAULT_KS))
    if ks[0] < 1:
        raise ValueError(f"cut-offs must be positive, got {ks}")
    if match not in MATCH_CHOICES:
        raise ValueError(f"answer matching must be one of {MATCH_CHOICES}, got {match!r}")
    ws = Workspace.resolve(workspace)
    read_run(ws, run)  # unknown runs fail here with the list of known ones
    scored_in = scoring_passages(ws, run, passages)
    record = ws.stage_record(run_record_stage(run))
    stage_fp = fingerprint(evaluate_stage(run), ks, match, record.fingerprint if record else None, scored_in.version,
                           *(ws.table_version(t) for t in ("questions", "qrels")))  # fmt: skip
    done = finished_report(ws, evaluate_stage(run), stage_fp, EvaluateReport, "run, questions and passages unchanged")
    # The metrics are dropped with the run's old rows when the run is replaced: then evaluate again.
    if done is not None and overall_metrics(ws, run).num_rows:
        return done
    report = evaluate_task(str(ws.root), run, ks, match, scored_in, stage_fp)
    publish_evaluation(run, report.plot, overall_metrics(ws, run).to_pylist())  # table + plot in the UI
    log_report(f"evaluate {run}", report)
    return report
