"""`odqa evaluate`: a run's R@K (micro, per relation, macro) and qrels metrics into `metrics`.

A run is evaluated on every dataset split its questions belong to, over all questions of that
split (`pipelines.evaluation.run_scores`). Qrels metrics use the `qrels` table when it has
judgments for the split, else the questions' `positive_ids` (binary). The plot of R@K against K
goes to `<workspace>/plots/`, and an artifact with the figures to the flow run.
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
from ...storage.choices import MATCH_CHOICES, AnswerMatch
from ...storage.fingerprint import fingerprint
from ...storage.metrics import overall_metrics
from ...storage.passages import passage_texts
from ...storage.questions import EVALUATION_COLUMNS, load_questions, questions_with_ids, relevance_judgments
from ...storage.reports import Report
from ...storage.runs import evaluation_source, read_run, run_record_stage
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


def score_run(ws: Workspace, run: str, ks: tuple[int, ...], match: str) -> list[SplitScores]:
    """Score a run on every dataset split its questions come from."""
    rows = read_run(ws, run)
    qids = sorted(set(rows.column("question_id").to_pylist()))
    touched = questions_with_ids(ws, qids, ["dataset", "split"])
    pairs = sorted(set(zip(touched.column("dataset").to_pylist(), touched.column("split").to_pylist(), strict=True)))
    if not pairs:
        raise ValueError(f"none of the {len(qids)} question ids of run {run!r} is in the questions table")
    texts, missing = passage_texts(ws, rows.column("passage_id").to_pylist(), with_title=False)
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
def evaluate_task(workspace: str, run: str, ks: list[int], match: str, stage_fp: str) -> EvaluateReport:
    ws = Workspace.resolve(workspace)
    results = score_run(ws, run, tuple(ks), match)
    record = ws.stage_record(run_record_stage(run))
    made_by = record.report if record else {}
    created = datetime.now(timezone.utc)
    tables, splits = [], []
    for scores in results:
        config = json.dumps({"run": made_by, "ks": ks, "match": scores.match, **scores.info}, sort_keys=True,
                            default=str)  # fmt: skip
        table = metrics_table(scores.values, run=run, dataset=scores.dataset, split=scores.split)
        table = table.append_column("created_at", pa.array([created] * table.num_rows, pa.timestamp("us", tz="UTC")))
        tables.append(table.append_column("config", pa.array([config] * table.num_rows, pa.string())))
        splits.append({"dataset": scores.dataset, "split": scores.split, "questions": scores.questions, **scores.info})
    plot = recall_plot(ws, f"recall-{run}", f"Top-K retrieval accuracy of {run}", [(run, s) for s in results])
    metrics = pa.concat_tables(tables)
    with ws.transaction(evaluate_stage(run), fingerprint=stage_fp) as tx:
        tx.replace_source("metrics", evaluation_source(run))
        tx.write("metrics", metrics, source=evaluation_source(run))
        report = EvaluateReport(run=run, splits=splits, metrics=metrics.num_rows, plot=plot)
        tx.report = report.ledger()
    return report


def evaluate_stage(run: str) -> str:
    """The ledger name of a run's evaluation (the pipeline checks it is still there)."""
    return f"evaluate:{run}"


@flow(name="evaluate")
def evaluate_flow(run: str, ks: list[AtLeastOne] | None = None, match: AnswerMatch = "auto",
                  workspace: str | None = None) -> EvaluateReport:  # fmt: skip
    """Evaluate RUN: answer-based R@K (micro, per relation, macro) and qrels metrics into `metrics`.

    Args:
        run: Name of a retrieval run in the `runs` table, e.g. bm25-trex-test.
        ks: Cut-offs K of R@K; empty: 1, 5, 20 and 100.
        match: How an answer matches a passage: auto (DPR's regex mode for CuratedTREC, whose
            answers are patterns, else string), string (DPR's normalized token match) or regex.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
    """
    ks = sorted(set(ks or DEFAULT_KS))
    if ks[0] < 1:
        raise ValueError(f"cut-offs must be positive, got {ks}")
    if match not in MATCH_CHOICES:
        raise ValueError(f"answer matching must be one of {MATCH_CHOICES}, got {match!r}")
    ws = Workspace.resolve(workspace)
    read_run(ws, run)  # unknown runs fail here with the list of known ones
    record = ws.stage_record(run_record_stage(run))
    stage_fp = fingerprint(evaluate_stage(run), ks, match, record.fingerprint if record else None,
                           *(ws.table_version(t) for t in ("questions", "passages", "qrels")))  # fmt: skip
    done = finished_report(ws, evaluate_stage(run), stage_fp, EvaluateReport, "run, questions and passages unchanged")
    # The metrics are dropped with the run's old rows when the run is replaced: then evaluate again.
    if done is not None and overall_metrics(ws, run).num_rows:
        return done
    report = evaluate_task(str(ws.root), run, ks, match, stage_fp)
    publish_evaluation(run, report.plot, overall_metrics(ws, run).to_pylist())  # table + plot in the UI
    log_report(f"evaluate {run}", report)
    return report
