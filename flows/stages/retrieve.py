"""`odqa retrieve`: the top passages of every question of a dataset split, into the `runs` table.

One stage for every retriever (BM25, dense, hybrid; opened by `models.searchers`): the run is keyed on the
retriever's configuration (index, model fingerprints, parameters) and the questions, so
re-running it unchanged is a no-op, and a run of the same name with other inputs replaces the
old rows (and their metrics, see `storage.runs`) in one commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from ...models.searchers import RetrieverChoice, open_searcher
from ...models.searchers.bm25 import open_bm25_searcher
from ...pipelines.dense.faiss_index import applicable_params
from ...pipelines.dense.hybrid import DEFAULT_DEPTH
from ...pipelines.retrieval.bm25 import DEFAULT_B, DEFAULT_K1
from ...pipelines.retrieval.run_cards import run_card_path, write_run_card
from ...pipelines.retrieval.trec import write_trec_run
from ...pipelines.search.limits import checked_k
from ...pipelines.search.searcher import search_run
from ...storage import Workspace
from ...storage.choices import IndexType, RetrieverKind
from ...storage.fingerprint import fingerprint
from ...storage.ids import check_run_name
from ...storage.questions import load_questions, questions_fingerprint
from ...storage.reports import Report
from ...storage.runs import (
    evaluation_source,
    read_run,
    run_record_stage,
    run_source,
    with_run_name,
)
from ...storage.write_targets import check_file_target, export_file
from ..plumbing.bounds import AtLeastOne, NotNegative, UnitInterval
from ..plumbing.report_text import log_report
from ..plumbing.runtime import flow_run_logs
from ..plumbing.skip_unchanged import finished_report
from ..plumbing.task_runners import RunnerSettings
from .index import ensure_dense_index


@dataclass
class RetrieveReport(Report):
    run: str
    retriever: str
    dataset: str
    split: str
    k: int
    config: dict[str, Any]
    questions: int
    questions_without_results: int
    rows: int
    passages_version: str | None = None  # the passages the index was built from: its ids' texts
    batches: int | None = None  # mapped BM25 batches, when a task runner searched them
    trec: str | None = None
    trec_rows: int | None = None

    def as_figures(self) -> dict[str, Any]:
        """The config with only the index parameters its index type uses (a flat index: none), and
        the model's path only where it is not the model's name already."""
        figures = super().as_figures()
        config = dict(self.config)
        if "index_params" in config:
            config["index_params"] = applicable_params(config["index_type"], config["index_params"])
        if config.get("model_path") == config.get("model"):
            config.pop("model_path", None)
        return {**figures, "config": config}


def check_trec_targets(ws: Workspace, out: str, force: bool) -> Path:
    """The TREC file `out` and its card `out.yaml` may be written (`storage.write_targets`: never
    in the workspace's own folders, an existing file only with `force`): the TREC path, resolved."""
    target = check_file_target(out, ws.root, option="--trec", force=force)
    check_file_target(run_card_path(target), ws.root, option="--trec's run card", force=force)
    return target


def write_trec(ws: Workspace, run: str, out: str, force: bool = False) -> tuple[str, int]:
    """The run as a TREC file at `out`, with its ranxhub-style run card at `out.yaml` (from the
    run's ledger record, when it has one): (the TREC path, rows written)."""
    target = check_trec_targets(ws, out, force)
    rows = read_run(ws, run).sort_by([("question_id", "ascending"), ("rank", "ascending")])
    with export_file(target, ws.root, option="--trec", force=force) as staged:
        written = write_trec_run(rows.to_batches(), staged, tag=run)
    record = ws.stage_record(run_record_stage(run))
    if record is not None:
        with export_file(run_card_path(target), ws.root, option="--trec's run card", force=force) as staged:
            write_run_card(record.report, str(target), staged)
    return str(target), written


@task(name="bm25-search-batch", tags=["cpu-parallel"], cache_policy=NO_CACHE)
def bm25_search_batch(workspace: str, questions: dict[str, list[str]], k: int, k1: float, b: float,
                      passages_version: str) -> pa.Table:  # fmt: skip
    """BM25 top-k of one batch of questions (one mapped task per batch, one search thread each),
    in the index of `passages_version`: every batch searches the passages the run started on."""
    searcher = open_bm25_searcher(Workspace.resolve(workspace), k1=k1, b=b, threads=1, passages_version=passages_version)
    try:
        return pa.concat_tables(list(search_run(searcher, pa.table(questions), k)))
    finally:
        searcher.close()


@flow(name="bm25-retrieve-mapped")
def bm25_mapped_flow(workspace: str, dataset: str, split: str, k: int, k1: float, b: float, batch: int,
                     passages_version: str) -> list[pa.Table]:  # fmt: skip
    """The run rows of a split's questions, `batch` questions per task on this flow's task runner
    (threads, processes or a Dask cluster): the same rows as searching them in one process."""
    questions = load_questions(Workspace.resolve(workspace), dataset, split, ["question_id", "question"])
    chunks = [questions.slice(start, batch).to_pydict() for start in range(0, questions.num_rows, batch)]
    return bm25_search_batch.map(workspace, chunks, k, k1, b, passages_version).result()


@task(name="retrieve-into-runs", cache_policy=NO_CACHE)
def retrieve_task(ws: Workspace, rows_of_run: Iterable[pa.Table], kind: str, dataset: str, split: str, run: str,
                  k: int, config: dict[str, Any], stage_fp: str, passages_version: str) -> RetrieveReport:  # fmt: skip
    questions = load_questions(ws, dataset, split, ["question_id", "question"])
    rows = retrieved = 0
    with ws.transaction(run_record_stage(run), fingerprint=stage_fp) as tx:
        tx.replace_source("runs", run_source(run))
        tx.replace_source("metrics", evaluation_source(run))
        writer = tx.writer("runs", source=run_source(run), prefix="run")
        for table in rows_of_run:
            writer.write(with_run_name(table, run))
            rows += table.num_rows
            retrieved += len(set(table.column("question_id").to_pylist()))
        writer.close()
        report = RetrieveReport(run=run, retriever=kind, dataset=dataset, split=split, k=k, config=config,
                                questions=questions.num_rows, questions_without_results=questions.num_rows - retrieved,
                                rows=rows, passages_version=passages_version)  # fmt: skip
        tx.report = report.ledger()
    return report


def retrieve(ws: Workspace, choice: RetrieverChoice, dataset: str, split: str, run: str, k: int,
             trec: str | None = None, runner: RunnerSettings | None = None, force: bool = False) -> RetrieveReport:  # fmt: skip
    """The retrieve stage: no-op check, run rows (BM25 in mapped batches on `runner`, if given),
    optional TREC file (replacing an existing one only with `force`)."""
    check_run_name(run)
    checked_k(k)
    if trec:
        check_trec_targets(ws, trec, force)  # before the run, not after it
    opened = open_searcher(ws, choice, ensure_index=ensure_dense_index)
    try:
        questions_fp = questions_fingerprint(ws, dataset, split, ["question_id", "question"])
        stage_fp = fingerprint(run_record_stage(run), choice.kind, dataset, split, k, opened.config, questions_fp)
        report = finished_report(ws, run_record_stage(run), stage_fp, RetrieveReport, "same retriever, parameters "
                                 "and questions as before")  # fmt: skip
        if report is None:
            batches = None
            if runner is not None and choice.kind == "bm25":
                mapped = bm25_mapped_flow.with_options(task_runner=runner.task_runner())
                rows_of_run: Iterable[pa.Table] = mapped(str(ws.root), dataset, split, k, choice.k1, choice.b,
                                                         runner.bm25_batch, opened.searcher.passages_version)  # fmt: skip
                batches = len(rows_of_run)  # type: ignore[arg-type]
            else:
                questions = load_questions(ws, dataset, split, ["question_id", "question"])
                rows_of_run = search_run(opened.searcher, questions, k)
            with flow_run_logs():
                report = retrieve_task(ws, rows_of_run, choice.kind, dataset, split, run, k, opened.config, stage_fp,
                                       opened.searcher.passages_version)  # fmt: skip
            report.batches = batches
    finally:
        opened.searcher.close()
    if trec:
        report.trec, report.trec_rows = write_trec(ws, run, trec, force)
    log_report(f"retrieve {run}", report)
    return report


@flow(name="retrieve")
def retrieve_flow(
    dataset: str,
    split: str,
    run: str,
    retriever: RetrieverKind = "bm25",
    k: AtLeastOne = 100,
    model: str | None = None,
    alpha: NotNegative | None = None,
    index_type: IndexType = "flat",
    depth: AtLeastOne = DEFAULT_DEPTH,
    k1: NotNegative = DEFAULT_K1,
    b: UnitInterval = DEFAULT_B,
    threads: AtLeastOne | None = None,
    trec: str | None = None,
    force: bool = False,
    workspace: str | None = None,
    runner: RunnerSettings | None = None,
) -> RetrieveReport:
    """Retrieve the top-k passages for every question of a dataset split into the `runs` table.

    Args:
        dataset: Dataset whose questions are the queries.
        split: Split of the dataset, e.g. test.
        run: Name of the run (replaces an earlier run of that name).
        retriever: bm25, dense or hybrid.
        k: Passages per question.
        model: dense/hybrid: model id, Hugging Face name or folder.
        alpha: hybrid: weight of BM25 (default: the model's tuned alpha).
        index_type: dense/hybrid: flat, hnsw or ivfpq.
        depth: hybrid: candidates taken from each side before fusing (TASER's K').
        k1: BM25 k1.
        b: BM25 b.
        threads: BM25 search threads (default: all cores).
        trec: Also write the run as a TREC file at this path (and its run card at this path + .yaml).
        force: Replace an existing TREC file (and card); never one in the workspace's own folders.
        workspace: Workspace directory (default: $ODQA_WORKSPACE, else ./workspace).
        runner: bm25: search batches of questions as tasks on this task runner (threads, processes, Dask).
    """
    choice = RetrieverChoice(kind=retriever, model=model, index_type=index_type, alpha=alpha, depth=depth,
                             k1=float(k1), b=float(b), threads=threads)  # fmt: skip
    return retrieve(Workspace.resolve(workspace), choice, dataset, split, run, k, trec, runner, force)
