"""Prefect flows that evaluate runs into `metrics` and compare runs with significance tests.

A run is evaluated on every dataset split its questions belong to, over *all* questions of
that split (a question the run has no rows for counts as a miss, as in DPR's evaluation).
Answer-based R@K needs the passages' text: text only, as DPR matches (not the title). Qrels
metrics use the `qrels` table when it has judgments for the split, else the questions'
`positive_ids` (binary). The plot of R@K against K goes to `<workspace>/plots/`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from prefect import flow, task

from flows.artifacts import publish_evaluation
from flows.retrieval import evaluation_source, passage_texts, read_run, run_stage
from flows.runtime import stage_logger
from pipelines.evaluation.answers import AnswerMatcher, MatchMode
from pipelines.evaluation.metrics import (
    DEFAULT_KS,
    DEFAULT_QRELS_METRICS,
    MetricValue,
    compare_runs,
    first_hit_ranks,
    mean_scores,
    metrics_table,
    per_question_hits,
    qrels_from_questions,
    qrels_scores,
    recall_at_k,
    recall_curve,
    render_recall_plot,
)
from storage import Workspace
from storage.fingerprint import fingerprint

MATCH_CHOICES = ("auto", "string", "regex")
QUESTION_COLUMNS = ["question_id", "dataset", "split", "answers", "relation", "positive_ids"]


def match_mode(dataset: str, match: str) -> MatchMode:
    """`auto`: DPR's regex mode for CuratedTREC (its answers are patterns), string otherwise."""
    if match not in MATCH_CHOICES:
        raise ValueError(f"answer matching must be one of {MATCH_CHOICES}, got {match!r}")
    if match == "auto":
        return "regex" if "trec" in dataset.lower() else "string"
    return match  # type: ignore[return-value]


@dataclass
class SplitScores:
    """One run scored on one dataset split."""

    dataset: str
    split: str
    questions: int
    match: str
    values: list[MetricValue] = field(default_factory=list)
    per_question: dict[str, dict[str, float]] = field(default_factory=dict)
    curve: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)


def _qrels_for(
    ws: Workspace, dataset: str, split: str, questions: pa.Table
) -> tuple[dict[str, dict[str, int]], str]:
    """Judgments from the `qrels` table, else binary ones from `positive_ids`."""
    wanted = (pc.field("dataset") == dataset) & (pc.field("split") == split)
    table = ws.read_table("qrels", columns=["question_id", "passage_id", "relevance"], filter=wanted)
    if table.num_rows:
        qrels: dict[str, dict[str, int]] = {}
        for qid, pid, rel in zip(*(table.column(i).to_pylist() for i in range(3)), strict=True):
            qrels.setdefault(qid, {})[pid] = int(rel)
        return {q: d for q, d in qrels.items() if any(r > 0 for r in d.values())}, "qrels"
    return qrels_from_questions(questions), "positive_ids"


def score_run(ws: Workspace, run: str, ks: tuple[int, ...], match: str) -> list[SplitScores]:
    """Score a run on every dataset split its questions come from."""
    rows = read_run(ws, run)
    qids = pa.array(sorted(set(rows["question_id"].to_pylist())), pa.string())
    touched = ws.read_table(
        "questions", columns=["dataset", "split"], filter=pc.field("question_id").isin(qids)
    )
    pairs = sorted(
        {(d, s) for d, s in zip(touched["dataset"].to_pylist(), touched["split"].to_pylist(), strict=True)}
    )
    if not pairs:
        raise ValueError(f"none of the {len(qids)} question ids of run {run!r} is in the questions table")
    texts, missing = passage_texts(ws, rows["passage_id"].to_pylist(), with_title=False)
    results = []
    for dataset, split in pairs:
        wanted = (pc.field("dataset") == dataset) & (pc.field("split") == split)
        questions = ws.read_table("questions", columns=QUESTION_COLUMNS, filter=wanted)
        mode = match_mode(dataset, match)
        scores = SplitScores(dataset, split, questions.num_rows, mode,
                             info={"passages_missing": missing})  # fmt: skip
        answered = sum(1 for a in questions["answers"].to_pylist() if a)
        if answered:
            # passages of the run that are not in the passages table can hold no answer
            matcher = AnswerMatcher(_TextsWithMissing(texts), mode=mode)
            first = first_hit_ranks(rows, questions, matcher)
            scores.values += recall_at_k(first, ks)
            scores.per_question.update(per_question_hits(first, ks))
            scores.curve = recall_curve(first, max(max(ks), int(pc.max(rows["rank"]).as_py())))
            scores.info["questions_with_answers"] = first.num_rows
        qrels, qrels_source = _qrels_for(ws, dataset, split, questions)
        if qrels:
            per_q = qrels_scores(rows, qrels, DEFAULT_QRELS_METRICS)
            scores.values += mean_scores(per_q)
            scores.per_question.update(per_q)
            scores.info.update({"qrels_source": qrels_source, "questions_judged": len(qrels)})
        if not scores.values:
            raise ValueError(
                f"{dataset}/{split} has neither answers nor relevance judgments to evaluate against"
            )
        results.append(scores)
    return results


class _TextsWithMissing(dict):
    """Passage texts where an unknown passage id reads as empty text (it contains no answer)."""

    def __missing__(self, key: str) -> str:
        return ""


def _plot_path(ws: Workspace, name: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    if len(slug) > 150:  # comparing many long run names would pass the file system's 255-byte limit
        slug = f"{slug[:130]}-{fingerprint(slug)[:16]}"
    return ws.plots_dir / f"{slug}.png"


def _write_png(path: Path, png: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(png)
    tmp.replace(path)


@task(name="evaluate-run")
def evaluate_task(workspace: str, run: str, ks: list[int], match: str, stage_fp: str) -> dict[str, Any]:
    ws = Workspace.resolve(workspace)
    results = score_run(ws, run, tuple(ks), match)
    record = ws.stage_record(run_stage(run))
    made_by = record.report if record else {}
    created = datetime.now(timezone.utc)
    tables, splits, curves = [], [], {}
    for scores in results:
        config = json.dumps(
            {"run": made_by, "ks": ks, "match": scores.match, **scores.info}, sort_keys=True, default=str
        )
        table = metrics_table(scores.values, run=run, dataset=scores.dataset, split=scores.split)
        table = table.append_column(
            "created_at", pa.array([created] * table.num_rows, pa.timestamp("us", tz="UTC"))
        )
        tables.append(table.append_column("config", pa.array([config] * table.num_rows, pa.string())))
        splits.append(
            {"dataset": scores.dataset, "split": scores.split, "questions": scores.questions, **scores.info}
        )
        if scores.curve is not None:
            curves[f"{run} ({scores.dataset}/{scores.split})"] = scores.curve
    plot = None
    if curves:
        plot = _plot_path(ws, f"recall-{run}")
        _write_png(plot, render_recall_plot(curves, title=f"Top-K retrieval accuracy of {run}"))
    metrics = pa.concat_tables(tables)
    with ws.transaction(f"evaluate:{run}", fingerprint=stage_fp) as tx:
        tx.replace_source("metrics", evaluation_source(run))
        tx.write("metrics", metrics, source=evaluation_source(run))
        report = {
            "run": run,
            "splits": splits,
            "metrics": metrics.num_rows,
            "plot": str(plot) if plot else None,
        }
        tx.report = report
    return report


def overall_rows(ws: Workspace, run: str) -> pa.Table:
    """The run's overall figures (group ''), one row per dataset split and metric."""
    return ws.sql(
        "SELECT dataset, split, metric, value FROM metrics "
        f"WHERE run = '{run.replace(chr(39), chr(39) * 2)}' AND \"group\" = '' ORDER BY dataset, split, metric"
    )


@flow(name="evaluate")
def evaluate_flow(
    run: str, ks: list[int] | None = None, match: str = "auto", workspace: str | None = None
) -> dict[str, Any]:
    """Evaluate RUN: answer-based R@K (micro, per relation, macro) and qrels metrics into `metrics`."""
    log = stage_logger()
    ks = sorted(set(ks or DEFAULT_KS))
    if ks[0] < 1:
        raise ValueError(f"cut-offs must be positive, got {ks}")
    match_mode("", match)
    ws = Workspace.resolve(workspace)
    read_run(ws, run)  # unknown runs fail here with the list of known ones
    record = ws.stage_record(run_stage(run))
    stage_fp = fingerprint(
        f"evaluate:{run}", ks, match, record.fingerprint if record else None,
        *(ws.table_version(t) for t in ("questions", "passages", "qrels")),
    )  # fmt: skip
    stage_record = ws.stage_record(f"evaluate:{run}")
    if stage_record is not None and stage_record.fingerprint == stage_fp and _has_metrics(ws, run):
        log.info("evaluate %s: run, questions and passages unchanged (no-op)", run)
        return {**stage_record.report, "noop": True}
    report = evaluate_task(str(ws.root), run, ks, match, stage_fp)
    publish_evaluation(report, overall_rows(ws, run).to_pylist())  # table + plot links in the UI
    log.info("evaluate %s: %s", run, report)
    return {**report, "noop": False}


def _has_metrics(ws: Workspace, run: str) -> bool:
    """False when the run was replaced since (its metrics were dropped with the old rows)."""
    return overall_rows(ws, run).num_rows > 0


@flow(name="compare")
def compare_flow(
    runs: list[str], ks: list[int] | None = None, match: str = "auto", alpha: float = 0.05,
    workspace: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Paired two-sided t-tests (Bonferroni-corrected) between runs on the splits they share."""
    if len(runs) < 2 or len(set(runs)) != len(runs):
        raise ValueError(f"compare needs at least two distinct runs, got {runs}")
    ks = sorted(set(ks or DEFAULT_KS))
    ws = Workspace.resolve(workspace)
    scored = {run: {(s.dataset, s.split): s for s in score_run(ws, run, tuple(ks), match)} for run in runs}
    shared = sorted(set.intersection(*(set(by_split) for by_split in scored.values())))
    if not shared:
        raise ValueError(f"runs {runs} share no dataset split to compare on")
    comparisons, means, curves = [], [], {}
    for dataset, split in shared:
        per_run = {run: scored[run][dataset, split].per_question for run in runs}
        table = compare_runs(per_run, alpha=alpha)
        comparisons += [{"dataset": dataset, "split": split, **row} for row in table.to_pylist()]
        for run in runs:
            split_scores = scored[run][dataset, split]
            means += [{"dataset": dataset, "split": split, "run": run, "metric": v.metric, "value": v.value}
                      for v in split_scores.values if v.group == ""]  # fmt: skip
            if split_scores.curve is not None:
                curves[f"{run} ({dataset}/{split})"] = split_scores.curve
    plot = None
    if curves:
        plot = _plot_path(ws, "compare-" + "-vs-".join(runs))
        _write_png(plot, render_recall_plot(curves, title="Top-K retrieval accuracy: " + " vs ".join(runs)))
    return {"runs": runs, "alpha": alpha, "means": means, "comparisons": comparisons,
            "plot": str(plot) if plot else None}  # fmt: skip
