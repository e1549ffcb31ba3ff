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

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from ..models.workspace_search import dense_build, loaded_model, mine_questions, open_dense_index
from ..pipelines.dense.faiss_index import gpu_count, read_index_metadata
from ..pipelines.dense.mining import TRAINING_MODES, MiningResult, round_negatives
from ..pipelines.evaluation.answers import MatchMode, match_mode
from ..pipelines.search.dense_searcher import DenseSearcher
from ..pipelines.search.searcher import QUESTION_CHUNK
from ..storage import Workspace
from ..storage.fingerprint import fingerprint
from ..storage.index_layout import IndexLayout
from ..storage.model_registry import resolve_model
from ..storage.questions import load_questions, questions_fingerprint, set_hard_negatives
from ..storage.reports import Report
from .runtime import flow_run_logs, stage_logger
from .searchers import dense_searcher
from .stages import finished_report
from .task_runners import (
    RestoreTorchThreads,
    RunnerSettings,
    limit_threads,
    mapping_runner,
    task_threads,
)

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


@flow(name="mine-negatives")
def mine_flow(
    model: str,
    dataset: str,
    split: str,
    mode: str = "single-set",
    depth: int = 100,
    count: int = 30,
    index_type: str = "flat",
    workspace: str | None = None,
    runner: RunnerSettings | None = None,
    question_batch: int = 4 * QUESTION_CHUNK,
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
    ref = resolve_model(ws, model)
    opened = dense_searcher(ws, ref, index_type)
    stage = f"mine:{dataset}:{split}"
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
            mined = mine_on_runner(settings, model=model, dataset=dataset, split=split, depth=depth, count=count,
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
    stage_logger().info("%s: %s", stage, report)
    return report


# --- one task per batch of questions on a task runner -------------------------------------------


_indexes: dict[str, tuple[str | None, Any]] = {}  # per process: index folder -> (identity, index)
_indexes_lock = threading.Lock()


class _OneSearchAtATime:
    """An index on GPUs, which FAISS does not let two threads search at once."""

    def __init__(self, index: Any) -> None:
        self.index, self.lock, self.meta = index, threading.Lock(), index.meta

    def search_run(self, queries: np.ndarray, k: int, question_ids: pa.Array) -> pa.Table:
        with self.lock:
            return self.index.search_run(queries, k, question_ids)


def _process_index(ws: Workspace, model: str, index_type: str):
    """The model's index, loaded (and checked for staleness) once per process and index build;
    CPU indexes are searched by several threads at once, GPU ones in turn."""
    ref = resolve_model(ws, model)
    folder = dense_build(ws, ref).index(index_type)
    meta = read_index_metadata(folder)
    identity = meta.to_json() if meta is not None else None
    with _indexes_lock:
        cached = _indexes.get(str(folder))
        if cached is None or cached[0] != identity:
            index = open_dense_index(ws, ref, index_type, loaded_model(ref.path))
            _indexes[str(folder)] = (identity, _OneSearchAtATime(index) if gpu_count() else index)
        return _indexes[str(folder)][1]


@task(name="dense-mine-batch", cache_policy=NO_CACHE)
def mine_batch_task(
    workspace: str, model: str, index_type: str, questions: dict[str, list], depth: int, count: int, mode: MatchMode,
    threads: int | None,
) -> MiningResult:  # fmt: skip
    """Hard negatives of one batch of questions (a MiningResult): `mine_questions` on the model and
    index this worker holds."""
    limit_threads(threads)
    ws = Workspace.resolve(workspace)
    searcher = DenseSearcher(loaded_model(resolve_model(ws, model).path).model, _process_index(ws, model, index_type))
    return mine_questions(ws, searcher, pa.table(questions), depth, count, mode)


@flow(name="mine-negatives-mapped")
def mine_mapped_flow(
    model: str,
    dataset: str,
    split: str,
    depth: int = 100,
    count: int = 30,
    index_type: str = "flat",
    batch: int = 4 * QUESTION_CHUNK,
    threads: int | None = None,
    workspace: str | None = None,
    match: MatchMode = "string",
) -> MiningResult:
    """Mined negatives (a MiningResult, as `mine_hard_negatives` over the whole split gives) with one
    task per `batch` questions on this flow's task runner."""
    if batch < 1:
        raise ValueError(f"batch must be positive, got {batch}")
    ws = Workspace.resolve(workspace)
    questions = load_questions(ws, dataset, split, MINE_COLUMNS)
    chunks = [questions.slice(start, batch).to_pydict() for start in range(0, questions.num_rows, batch)]
    with RestoreTorchThreads():
        futures = mine_batch_task.map(str(ws.root), model, index_type, chunks, depth, count, match, threads)
        parts = futures.result()
    # One sorted list, as mining the whole split at once gives (it orders questions by id).
    negatives = pa.concat_tables([p.negatives for p in parts]).sort_by("question_id")
    return MiningResult(negatives, sum(p.excluded_gold for p in parts), sum(p.excluded_answer for p in parts),
                        sum(p.without_negatives for p in parts), sum(p.unknown_questions for p in parts))  # fmt: skip


def mine_on_runner(runner: RunnerSettings, **params: Any) -> MiningResult:
    """`mine_mapped_flow` with the runner's task runner and its thread share per task."""
    return mine_mapped_flow.with_options(task_runner=runner.task_runner())(threads=task_threads(runner), **params)
