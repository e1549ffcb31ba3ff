"""Prefect flows for BM25 and runs: index the passages, retrieve into `runs`, import TREC runs,
and mine BM25 hard negatives into `questions.hard_negative_ids`.

Every BM25 flow runs the Java preflight first, so a missing or too old JDK fails in a second
with install instructions instead of after minutes of other work. The Lucene index lives at
`<workspace>/indexes/bm25` and records the passages table version it was built from; retrieving
from an index built on other passages is refused (rebuild with `odqa bm25 index`).

A run's rows carry the table source `run:<name>`, so re-running or re-importing a run replaces
its rows, and the metrics of the old rows (source `evaluate:<name>`) are dropped with them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from prefect import flow, task

from flows.runtime import stage_logger
from pipelines.evaluation.answers import AnswerMatcher
from pipelines.retrieval.bm25 import DEFAULT_B, DEFAULT_K1, Bm25Searcher, IndexInfo, build_index, open_index
from pipelines.retrieval.java import ensure_java
from pipelines.retrieval.negatives import MAX_HARD_NEGATIVES, select_hard_negatives
from pipelines.retrieval.trec import read_trec_run, write_trec_run
from storage import Workspace
from storage.fingerprint import file_sha256, fingerprint

BM25_INDEX = "bm25"


def run_source(run: str) -> str:
    """Table source of a run's rows in `runs`."""
    return f"run:{run}"


def evaluation_source(run: str) -> str:
    """Table source of a run's rows in `metrics` (dropped whenever the run is replaced)."""
    return f"evaluate:{run}"


def run_stage(run: str) -> str:
    """Stage name whose record keeps how a run was made (its config, shown with its metrics)."""
    return f"run:{run}"


def bm25_index_path(ws: Workspace) -> Path:
    return ws.indexes_dir / BM25_INDEX


def check_run_name(run: str) -> str:
    if not run or any(c.isspace() for c in run):
        raise ValueError(f"run name {run!r} must be non-empty and contain no whitespace (it is a TREC tag)")
    return run


# --- preflight ------------------------------------------------------------------------------


@task(name="java-preflight")
def java_preflight_task() -> dict[str, str]:
    """JDK 21+ with jdk.incubator.vector, or JavaMissingError saying what to install."""
    info = ensure_java()
    return {"java_home": str(info.home), "java_version": info.version}


# --- index ----------------------------------------------------------------------------------


def _passage_records(ws: Workspace) -> Iterator[tuple[str, str | None, str | None]]:
    for batch in ws.scan("passages", columns=["passage_id", "title", "text"]):
        ids, titles, texts = (batch.column(i).to_pylist() for i in range(3))
        yield from zip(ids, titles, texts, strict=True)


@task(name="bm25-build-index")
def build_bm25_index_task(workspace: str, snapshot: str, threads: int) -> dict[str, Any]:
    ws = Workspace.resolve(workspace)
    info = build_index(_passage_records(ws), bm25_index_path(ws), snapshot=snapshot, threads=threads)
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(info).items()}


@flow(name="bm25-index")
def bm25_index_flow(workspace: str | None = None, threads: int | None = None) -> dict[str, Any]:
    """Build the Lucene BM25 index of the passages table (title + text), unless it is current."""
    log = stage_logger()
    java = java_preflight_task()
    ws = Workspace.resolve(workspace)
    passages = ws.rows("passages")
    if passages == 0:
        raise ValueError("the passages table is empty: ingest a dump or import passages first")
    snapshot = ws.table_version("passages")
    path = bm25_index_path(ws)
    try:
        current = open_index(path, snapshot)
    except (FileNotFoundError, RuntimeError):
        current = None
    if current is not None:
        log.info("BM25 index at %s is current (passages %s): no-op", path, snapshot)
        return {"noop": True, "path": str(path), "documents": current.documents, "snapshot": snapshot}
    report = build_bm25_index_task(str(ws.root), snapshot, threads or os.cpu_count() or 1)
    log.info("built BM25 index: %s", report)
    return {"noop": False, **report, **java}


def open_current_bm25(ws: Workspace) -> IndexInfo:
    """The workspace's BM25 index, refusing one built from other passages than the current ones."""
    return open_index(bm25_index_path(ws), ws.table_version("passages"))


# --- retrieval ------------------------------------------------------------------------------


def load_questions(ws: Workspace, dataset: str, split: str, columns: list[str]) -> pa.Table:
    """The questions of one dataset split; an unknown pair is an error listing what exists."""
    wanted = (pc.field("dataset") == dataset) & (pc.field("split") == split)
    table = ws.read_table("questions", columns=columns, filter=wanted)
    if table.num_rows == 0:
        known = ws.sql("SELECT DISTINCT dataset, split FROM questions ORDER BY ALL").to_pylist()
        listing = ", ".join(f"{r['dataset']}/{r['split']}" for r in known) or "none"
        raise ValueError(f"no questions for dataset {dataset!r} split {split!r}; known: {listing}")
    return table


def _bm25_batches(
    ws: Workspace, questions: pa.Table, k: int, options: dict[str, Any]
) -> Iterator[pa.RecordBatch]:
    searcher = Bm25Searcher(open_current_bm25(ws), k1=options["k1"], b=options["b"])
    try:
        pairs = zip(questions["question_id"].to_pylist(), questions["question"].to_pylist(), strict=True)
        yield from searcher.search(pairs, k=k, threads=options["threads"], total=questions.num_rows)
    finally:
        searcher.close()


def _bm25_config(ws: Workspace, options: dict[str, Any]) -> dict[str, Any]:
    java_preflight_task()
    index = open_current_bm25(ws)
    return {"k1": options["k1"], "b": options["b"], "index_snapshot": index.snapshot}


# Retrievers `odqa retrieve --retriever NAME` can use: NAME -> (config of the run, run batches).
# The config is recorded with the run and decides whether re-running it is a no-op; the batch
# function yields rows (question_id, passage_id, rank, score) for the given questions.
RunConfig = Callable[[Workspace, dict[str, Any]], dict[str, Any]]
RunBatches = Callable[[Workspace, pa.Table, int, dict[str, Any]], Iterator[pa.RecordBatch]]
RETRIEVERS: dict[str, tuple[RunConfig, RunBatches]] = {"bm25": (_bm25_config, _bm25_batches)}


def _with_run(batch: pa.RecordBatch, run: str) -> pa.Table:
    table = pa.Table.from_batches([batch])
    return table.append_column("run", pa.array([run] * table.num_rows, pa.string()))


def read_run(ws: Workspace, run: str) -> pa.Table:
    """A run's rows; an unknown run is an error listing the known ones."""
    table = ws.read_table(
        "runs", columns=["question_id", "passage_id", "rank", "score"], filter=pc.field("run") == run
    )
    if table.num_rows == 0:
        known = [r["run"] for r in ws.sql("SELECT DISTINCT run FROM runs ORDER BY run").to_pylist()]
        raise ValueError(f"no run named {run!r}; known runs: {', '.join(known) or 'none'}")
    return table


def write_trec(ws: Workspace, run: str, out: str) -> int:
    target = Path(out).expanduser().resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    rows = read_run(ws, run).sort_by([("question_id", "ascending"), ("rank", "ascending")])
    return write_trec_run(rows.to_batches(), target, tag=run)


@task(name="retrieve-into-runs")
def retrieve_task(
    workspace: str, retriever: str, dataset: str, split: str, run: str, k: int, options: dict[str, Any],
    config: dict[str, Any], stage_fp: str,
) -> dict[str, Any]:  # fmt: skip
    ws = Workspace.resolve(workspace)
    questions = load_questions(ws, dataset, split, ["question_id", "question"])
    rows = retrieved = 0
    with ws.transaction(run_stage(run), fingerprint=stage_fp) as tx:
        tx.replace_source("runs", run_source(run))
        tx.replace_source("metrics", evaluation_source(run))
        writer = tx.writer("runs", source=run_source(run), prefix="run")
        for batch in RETRIEVERS[retriever][1](ws, questions, k, options):
            writer.write(_with_run(batch, run))
            rows += batch.num_rows
            retrieved += len(set(batch.column(0).to_pylist()))
        writer.close()
        report = {
            "run": run, "retriever": retriever, "dataset": dataset, "split": split, "k": k, **config,
            "questions": questions.num_rows, "questions_without_results": questions.num_rows - retrieved,
            "rows": rows,
        }  # fmt: skip
        tx.report = report
    return report


@flow(name="retrieve")
def retrieve_flow(
    dataset: str,
    split: str,
    run: str,
    retriever: str = "bm25",
    k: int = 100,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
    threads: int | None = None,
    trec: str | None = None,
    workspace: str | None = None,
) -> dict[str, Any]:
    """Retrieve the top-k passages for every question of a dataset split into the `runs` table."""
    if retriever not in RETRIEVERS:
        raise ValueError(f"unknown retriever {retriever!r}; available: {', '.join(sorted(RETRIEVERS))}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    options = {"k1": float(k1), "b": float(b), "threads": threads or os.cpu_count() or 1}
    return run_retriever(Workspace.resolve(workspace), retriever, dataset, split, run, k, options, trec)


def run_retriever(
    ws: Workspace, retriever: str, dataset: str, split: str, run: str, k: int, options: dict[str, Any],
    trec: str | None,
) -> dict[str, Any]:  # fmt: skip
    """The retrieve stage for any registered retriever: no-op check, run rows, optional TREC file.

    BM25 here and dense/hybrid in flows/dense.py share it, so every retriever follows the same
    stage and no-op rules.
    """
    log = stage_logger()
    check_run_name(run)
    config = RETRIEVERS[retriever][0](ws, options)
    questions_fp = questions_fingerprint(ws, dataset, split, ["question_id", "question"])
    stage_fp = fingerprint(run_stage(run), retriever, dataset, split, k, config, questions_fp)
    if ws.stage_is_current(run_stage(run), stage_fp):
        log.info("run %s: same retriever, parameters and questions as before (no-op)", run)
        report = {**ws.stage_record(run_stage(run)).report, "noop": True}
    else:
        report = {**retrieve_task(str(ws.root), retriever, dataset, split, run, k, options, config, stage_fp),
                  "noop": False}  # fmt: skip
    if trec:
        report["trec"] = str(Path(trec).expanduser().resolve())
        report["trec_rows"] = write_trec(ws, run, trec)
    log.info("retrieve %s: %s", run, report)
    return report


def questions_fingerprint(ws: Workspace, dataset: str, split: str, columns: list[str]) -> str:
    """Content hash of the columns a stage reads from one dataset split's questions."""
    table = load_questions(ws, dataset, split, columns).sort_by("question_id")
    return fingerprint(dataset, split, [table.column(c).to_pylist() for c in columns])


# --- importing runs -------------------------------------------------------------------------


@flow(name="import-run")
def import_run_flow(path: str, run: str, fmt: str = "trec", workspace: str | None = None) -> dict[str, Any]:
    """Import an external run file (TREC format) into `runs` under the name RUN."""
    if fmt != "trec":
        raise ValueError(f"unknown run format {fmt!r}; expected 'trec'")
    check_run_name(run)
    log = stage_logger()
    ws = Workspace.resolve(workspace)
    source_path = Path(path).expanduser().resolve()
    if not source_path.is_file():
        raise FileNotFoundError(f"run file not found: {source_path}")
    stage_fp = fingerprint(run_stage(run), "import", fmt, file_sha256(source_path))
    if ws.stage_is_current(run_stage(run), stage_fp):
        log.info("run %s: same file as before (no-op)", run)
        return {**ws.stage_record(run_stage(run)).report, "noop": True}
    table = read_trec_run(source_path)
    ids = pa.array(sorted(set(table["question_id"].to_pylist())), pa.string())
    known = ws.read_table(
        "questions", columns=["question_id"], filter=pc.field("question_id").isin(ids)
    ).num_rows
    with ws.transaction(run_stage(run), fingerprint=stage_fp) as tx:
        tx.replace_source("runs", run_source(run))
        tx.replace_source("metrics", evaluation_source(run))
        tx.write("runs", table.append_column("run", pa.array([run] * table.num_rows, pa.string())),
                 source=run_source(run))  # fmt: skip
        report = {"run": run, "retriever": f"imported {fmt}", "path": str(source_path), "rows": table.num_rows,
                  "questions": len(ids), "questions_unknown": len(ids) - known}  # fmt: skip
        tx.report = report
    if report["questions_unknown"]:
        log.warning("%d question ids of %s are not in the questions table; evaluation ignores them",
                    report["questions_unknown"], source_path.name)  # fmt: skip
    return {**report, "noop": False}


# --- hard negatives -------------------------------------------------------------------------


def passage_texts(ws: Workspace, passage_ids: list[str], *, with_title: bool) -> tuple[dict[str, str], int]:
    """passage_id -> text (or title + newline + text) for the given ids, and how many were missing."""
    wanted = pa.array(sorted(set(passage_ids)), pa.string())
    table = ws.read_table("passages", columns=["passage_id", "title", "text"],
                          filter=pc.field("passage_id").isin(wanted))  # fmt: skip
    texts: dict[str, str] = {}
    for pid, title, text in zip(*(table.column(i).to_pylist() for i in range(3)), strict=True):
        texts[pid] = f"{title or ''}\n{text or ''}" if with_title else (text or "")
    return texts, len(wanted) - len(texts)


def rewrite_hard_negatives(tx: Any, dataset: str, split: str, negatives: dict[str, list[str]]) -> int:
    """Replace `hard_negative_ids` of the given questions in the parts that hold them.

    Each part keeps the source that imported it (storage's `rewrite`), so a later import of
    that source still replaces its rows as a whole.
    """
    updated = 0

    def set_negatives(part: pa.Table) -> pa.Table:
        nonlocal updated
        mine = pc.and_(pc.equal(part["dataset"], dataset), pc.equal(part["split"], split)).to_pylist()
        ids = part["question_id"].to_pylist()
        new = [
            negatives[qid] if in_split and qid in negatives else old
            for qid, old, in_split in zip(ids, part["hard_negative_ids"].to_pylist(), mine, strict=True)
        ]
        updated += sum(1 for qid, in_split in zip(ids, mine, strict=True) if in_split and qid in negatives)
        column = part.schema.get_field_index("hard_negative_ids")
        return part.set_column(column, part.schema.field(column), pa.array(new, part.schema.field(column).type))

    tx.rewrite("questions", set_negatives)
    return updated


@flow(name="negatives-bm25")
def bm25_negatives_flow(
    dataset: str,
    split: str,
    count: int = 1,
    depth: int = 100,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
    threads: int | None = None,
    workspace: str | None = None,
) -> dict[str, Any]:
    """DPR's BM25 hard negatives: per question, the `count` best BM25 passages (of the top
    `depth`) that contain no answer (title or text) and are not positives."""
    if not 1 <= count <= MAX_HARD_NEGATIVES:
        raise ValueError(f"--count must be between 1 and {MAX_HARD_NEGATIVES}, got {count}")
    log = stage_logger()
    java_preflight_task()
    ws = Workspace.resolve(workspace)
    index = open_current_bm25(ws)
    columns = ["question_id", "question", "answers", "positive_ids"]
    stage = f"negatives-bm25:{dataset}:{split}"
    stage_fp = fingerprint(
        stage, count, depth, k1, b, index.snapshot, questions_fingerprint(ws, dataset, split, columns)
    )
    if ws.stage_is_current(stage, stage_fp):
        log.info("%s: same index, questions and parameters (no-op)", stage)
        return {**ws.stage_record(stage).report, "noop": True}
    questions = load_questions(ws, dataset, split, columns)
    run = pa.Table.from_batches(
        list(_bm25_batches(ws, questions, max(depth, count), {"k1": k1, "b": b, "threads": threads or os.cpu_count() or 1}))
    )  # fmt: skip
    texts, missing = passage_texts(ws, run["passage_id"].to_pylist(), with_title=True)
    if missing:
        raise RuntimeError(
            f"{missing} passages found by BM25 are not in the passages table; rebuild the index"
        )
    chosen = select_hard_negatives(run, questions, AnswerMatcher(texts), count=count)
    negatives = dict(
        zip(chosen["question_id"].to_pylist(), chosen["hard_negative_ids"].to_pylist(), strict=True)
    )
    found = [len(ids) for ids in negatives.values()]
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        updated = rewrite_hard_negatives(tx, dataset, split, negatives)
        report = {
            "dataset": dataset, "split": split, "count": count, "depth": depth, "questions": len(negatives),
            "questions_updated": updated, "with_full_count": sum(1 for n in found if n == count),
            "without_negative": sum(1 for n in found if n == 0), "index_snapshot": index.snapshot,
        }  # fmt: skip
        tx.report = report
    log.info("%s: %s", stage, json.dumps(report))
    return {**report, "noop": False}
