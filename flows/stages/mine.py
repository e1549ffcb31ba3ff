"""`odqa mine`: hard negatives mined with a trained model (TASER App. B, DPR's recipe).

P2 = the model's top `depth` passages minus gold and answer-bearing ones, the best `count` kept;
the split's `hard_negative_ids` become P1 u P2 (single-set) or P2 (multi-set), where P1 are the
negatives the split had before its first mining (BM25's), kept in `indexes/negatives/` so that
mining again (another model, another round) combines with the original P1. With a runner (or
`$ODQA_DASK_ADDRESS`) the questions are mined in mapped tasks of `question_batch` questions; the
negatives are the same either way. A worker loads a model once per thread and an index once per
process (FAISS searches are thread-safe on CPU; GPU indexes are searched in turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE

from ...models.searchers import RetrieverChoice, open_searcher
from ...models.searchers.dense import open_dense_searcher
from ...pipelines.dense.mining import MiningResult, mine_hard_negatives, round_negatives
from ...pipelines.evaluation.answers import MatchMode, match_mode
from ...pipelines.search.searcher import QUESTION_CHUNK, Searcher, search_run
from ...storage import Workspace
from ...storage.choices import TRAINING_MODES, IndexType, TrainingMode
from ...storage.fingerprint import fingerprint
from ...storage.index_layout import IndexLayout
from ...storage.model_registry import ModelRef
from ...storage.passages import passage_texts
from ...storage.questions import load_questions, questions_fingerprint, set_hard_negatives
from ...storage.reports import Report
from ..plumbing.bounds import AtLeastOne
from ..plumbing.report_text import log_report
from ..plumbing.runtime import flow_run_logs
from ..plumbing.skip_unchanged import finished_report
from ..plumbing.task_runners import (
    RestoreTorchThreads,
    RunnerSettings,
    limit_threads,
    mapping_runner,
    task_threads,
)
from .index import ensure_dense_index

MINE_COLUMNS = ["question_id", "question", "answers", "positive_ids"]


@dataclass
class MineReport(Report):
    model: str
    dataset: str
    split: str
    mode: str
    depth: int
    count: int
    questions: int
    questions_updated: int
    excluded_gold: int
    excluded_answer_bearing: int
    without_negatives: int
    mean_negatives: float
    negatives_file: str


def mine_questions(ws: Workspace, searcher: Searcher, questions: pa.Table, depth: int, count: int,
                   mode: MatchMode) -> MiningResult:  # fmt: skip
    """Hard negatives of `questions` (question_id, question, answers, positive_ids): each one's top
    `depth` passages minus gold and answer-bearing ones, the best `count` kept."""
    run = pa.concat_tables(list(search_run(searcher, questions, depth)))
    texts, missing = passage_texts(ws, run.column("passage_id").to_pylist(), with_title=False,
                                   version=searcher.passages_version)  # fmt: skip
    if missing:
        raise RuntimeError(f"{missing} retrieved passages are not in the passages table; rebuild the index")
    return mine_hard_negatives(run, questions, texts, num_negatives=count, depth=depth, mode=mode)


def first_round_negatives(ws: Workspace, dataset: str, split: str, questions: pa.Table) -> pa.Table:
    """P1: the hard negatives the split had before its first mining (BM25's, DPR's recipe), kept on
    the first mining so later minings combine with it rather than with an earlier P1 u P2."""
    layout = IndexLayout.of(ws)
    name = f"p1-{dataset}-{split}"
    p1 = layout.read_negatives(name)
    if p1 is None:
        p1 = pa.table({"question_id": questions.column("question_id"),
                       "hard_negative_ids": questions.column("hard_negative_ids").cast(pa.list_(pa.string()))})  # fmt: skip
        layout.write_negatives(name, p1)
    return p1


def mined_negatives_name(model_key: str, dataset: str, split: str) -> str:
    return f"p2-{model_key}-{dataset}-{split}"


def mine_stage(dataset: str, split: str) -> str:
    """The ledger name of mining a question set (the pipeline checks it is still there)."""
    return f"mine:{dataset}:{split}"


@flow(name="mine-negatives")
def mine_flow(
    model: str,
    dataset: str,
    split: str,
    mode: TrainingMode = "single-set",
    depth: AtLeastOne = 100,
    count: AtLeastOne = 30,
    index_type: IndexType = "flat",
    workspace: str | None = None,
    runner: RunnerSettings | None = None,
    question_batch: AtLeastOne = 4 * QUESTION_CHUNK,
) -> MineReport:
    """Mine P2 with MODEL and set the split's hard_negative_ids to P1 u P2 (single-set) or P2
    (multi-set); see the module doc.

    Args:
        model: Trained model id, Hugging Face name or folder that retrieves the candidates.
        dataset: Dataset whose questions get mined negatives.
        split: Split of the dataset, e.g. train.
        mode: single-set: new negatives are the BM25 ones plus the mined ones; multi-set: the mined
            ones only (TASER).
        depth: Passages retrieved per question.
        count: Mined negatives kept per question (no gold, no answer-bearing passage).
        index_type: The model's FAISS index: flat, hnsw or ivfpq.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        runner: Mine batches of questions as tasks on this task runner (threads, processes, Dask);
            empty: in process.
        question_batch: Questions per mining task on a task runner.
    """
    if mode not in TRAINING_MODES:
        raise ValueError(f"mode must be one of {TRAINING_MODES}, got {mode!r}")
    ws = Workspace.resolve(workspace)
    opened = open_searcher(ws, RetrieverChoice(kind="dense", model=model, index_type=index_type),
                           ensure_index=ensure_dense_index)  # fmt: skip
    ref: ModelRef = opened.ref  # type: ignore[assignment]
    stage = mine_stage(dataset, split)
    questions_fp = questions_fingerprint(ws, dataset, split, ["question_id", "question", "answers", "positive_ids"])
    stage_fp = fingerprint(stage, opened.config, mode, depth, count, questions_fp)
    done = finished_report(ws, stage, stage_fp, MineReport, "same model, questions and parameters")
    if done is not None:
        return done
    questions = load_questions(ws, dataset, split, [*MINE_COLUMNS, "hard_negative_ids"])
    p1 = first_round_negatives(ws, dataset, split, questions)
    matching = match_mode(dataset)
    settings = mapping_runner(runner)
    with flow_run_logs():
        if settings is None:
            mined = mine_questions(ws, opened.searcher, questions.select(MINE_COLUMNS), depth, count, matching)
        else:
            mined = mine_on_runner(settings, ref=ref, dataset=dataset, split=split, depth=depth, count=count,
                                   index_type=index_type, batch=question_batch, workspace=str(ws.root),
                                   match=matching)  # fmt: skip
    p2_file = IndexLayout.of(ws).write_negatives(mined_negatives_name(ref.key, dataset, split), mined.negatives)
    combined = round_negatives(2, mode, p1, mined.negatives)  # type: ignore[arg-type]
    negatives = dict(zip(combined["question_id"].to_pylist(), combined["hard_negative_ids"].to_pylist(), strict=True))
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        updated = set_hard_negatives(tx, dataset, split, negatives)
        report = MineReport(model=model, dataset=dataset, split=split, mode=mode, depth=depth, count=count,
                            questions=questions.num_rows, questions_updated=updated, excluded_gold=mined.excluded_gold,
                            excluded_answer_bearing=mined.excluded_answer, without_negatives=mined.without_negatives,
                            mean_negatives=round(float(np.mean([len(v) for v in negatives.values()] or [0])), 2),
                            negatives_file=str(p2_file))  # fmt: skip
        tx.report = report.ledger()
    log_report(stage, report)
    return report


# --- one task per batch of questions on a task runner -------------------------------------------


@task(name="dense-mine-batch", cache_policy=NO_CACHE)
def mine_batch_task(
    workspace: str, ref: ModelRef, index_type: IndexType, questions: dict[str, list], depth: int, count: int,
    mode: MatchMode,
    threads: int | None,
) -> MiningResult:  # fmt: skip
    """Hard negatives of one batch of questions (a MiningResult): `mine_questions` on the model and
    index this worker holds."""
    limit_threads(threads)
    ws = Workspace.resolve(workspace)
    searcher, _ = open_dense_searcher(ws, ref, index_type, shared_index=True)
    return mine_questions(ws, searcher, pa.table(questions), depth, count, mode)


@flow(name="mine-negatives-mapped")
def mine_mapped_flow(
    ref: ModelRef,
    dataset: str,
    split: str,
    depth: int = 100,
    count: int = 30,
    index_type: IndexType = "flat",
    batch: int = 4 * QUESTION_CHUNK,
    threads: int | None = None,
    workspace: str | None = None,
    match: MatchMode = "string",
) -> MiningResult:
    """Mined negatives (a MiningResult, as `mine_hard_negatives` over the whole split gives) with one
    task per `batch` questions on this flow's task runner; `ref` is the model `mine_flow` resolved."""
    if batch < 1:
        raise ValueError(f"batch must be positive, got {batch}")
    ws = Workspace.resolve(workspace)
    questions = load_questions(ws, dataset, split, MINE_COLUMNS)
    chunks = [questions.slice(start, batch).to_pydict() for start in range(0, questions.num_rows, batch)]
    with RestoreTorchThreads():
        futures = mine_batch_task.map(str(ws.root), unmapped(ref), index_type, chunks, depth, count, match, threads)
        parts = futures.result()
    # One sorted list, as mining the whole split at once gives (it orders questions by id).
    negatives = pa.concat_tables([p.negatives for p in parts]).sort_by("question_id")
    return MiningResult(negatives, sum(p.excluded_gold for p in parts), sum(p.excluded_answer for p in parts),
                        sum(p.without_negatives for p in parts), sum(p.unknown_questions for p in parts))  # fmt: skip


def mine_on_runner(runner: RunnerSettings, **params: Any) -> MiningResult:
    """`mine_mapped_flow` with the runner's task runner and its thread share per task."""
    return mine_mapped_flow.with_options(task_runner=runner.task_runner())(threads=task_threads(runner), **params)
