"""Dense stages mapped over a task runner: encoding shards and mining question batches.

`flows.dense.encode_flow` and `flows.dense.mine_flow` call these subflows when given a runner
(`RunnerSettings`, or `$ODQA_DASK_ADDRESS`), each with that runner's Prefect task runner:
threads or processes on one machine, a Dask cluster across several. The output is the same as
the unmapped path's, bit for bit:

* Encoding. The flow plans the shards of one `passages` snapshot (ordinal ranges, see
  `pipelines.dense.shard_plan`), skips those the manifest lists as finished, and maps one task per
  pending shard. A task reads its slice of that snapshot's files, encodes it with `encode_shard`
  (the same length-sorted batches as the in-process path) and writes its shard files atomically;
  the flow alone records finished shards in the manifest (one writer), so a killed run resumes
  with the shards it did not record.
* Mining. One task per batch of questions searches the current model's index and drops gold and
  answer-bearing passages; the flow concatenates the batches in order.

A worker loads a model once per thread (tokenizers are not safe to share between threads) and an
index once per process (FAISS searches are), and tasks sharing one machine split its cores
between them rather than each starting a full set of intra-op threads.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed

from flows.dense import (
    EMBEDDINGS,
    PASSAGE_COLUMNS,
    QUESTION_CHUNK,
    dense_dir,
    mine_questions,
    open_model_index,
    resolve_model,
)
from flows.runtime import stage_logger
from flows.task_runners import RunnerSettings, dask_address
from pipelines.dense.shard_plan import ShardRange, file_spans, pending_shards, threads_per_task
from storage import Workspace

MINE_COLUMNS = ["question_id", "question", "answers", "positive_ids"]

_local = threading.local()  # per worker thread: loaded retrievers
_indexes: dict[str, tuple[tuple, Any]] = {}  # per process: index folder -> (identity, index)
_indexes_lock = threading.Lock()
_host_slots: dict[str, int] = {}  # per process: scheduler address -> task slots of its workers on this host


# --- where tasks run ------------------------------------------------------------------------


def task_threads(runner: RunnerSettings) -> int | None:
    """Intra-op threads per task of a runner on this machine; None for a remote Dask cluster,
    whose workers work it out from the cluster (`_limit_threads`)."""
    if dask_address(runner.dask_address):
        return None
    cores = os.cpu_count() or 1
    concurrent = runner.workers or (2 if runner.kind == "dask" else cores)  # make_task_runner's defaults
    return threads_per_task(cores, concurrent)


def _dask_slots_on_this_host() -> int | None:
    """Threads of all Dask workers on this worker's host, or None outside a Dask worker."""
    try:
        from distributed import get_client, get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return None
    scheduler = worker.scheduler.address
    if scheduler not in _host_slots:
        workers = get_client().scheduler_info()["workers"]
        host = workers[worker.address]["host"] if worker.address in workers else worker.ip
        slots = sum(w["nthreads"] for w in workers.values() if w["host"] == host)
        _host_slots[scheduler] = slots or worker.state.nthreads
    return _host_slots[scheduler]


def _limit_threads(threads: int | None) -> int:
    """Set this task's torch (and FAISS) intra-op threads; returns the number set."""
    import torch

    if threads is None:
        slots = _dask_slots_on_this_host()
        threads = threads_per_task(os.cpu_count() or 1, slots) if slots else torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        import faiss

        faiss.omp_set_num_threads(threads)
    except ImportError:
        pass
    return threads


def _files_stamp(path: str) -> tuple:
    """What changes when the model at ``path`` is saved again (saves replace the folder's files)."""
    folder = Path(path)
    if not folder.is_dir():
        return (path,)
    return tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns, f.stat().st_ino) for f in sorted(folder.iterdir())
                 if f.is_file())  # fmt: skip


def _thread_retriever(path: str) -> tuple[Any, str]:
    """The retriever at ``path`` and its fingerprint, loaded once per worker thread (again when
    the model is saved anew: workers outlive training runs)."""
    cache = _local.__dict__.setdefault("retrievers", {})
    stamp = _files_stamp(path)
    if path not in cache or cache[path][0] != stamp:
        from models.retriever import load_retriever

        retriever = load_retriever(path)
        cache[path] = (stamp, retriever, retriever.config_fingerprint())
    return cache[path][1], cache[path][2]


class _OneSearchAtATime:
    """An index on GPUs, which FAISS does not let two threads search at once."""

    def __init__(self, index: Any) -> None:
        self.index, self.lock = index, threading.Lock()

    def search_run(self, queries: np.ndarray, k: int, question_ids: pa.Array) -> pa.Table:
        with self.lock:
            return self.index.search_run(queries, k, question_ids)


def _process_index(ws: Workspace, model: str, index_type: str, retriever):
    """The model's index, loaded (and checked for staleness) once per process and index build;
    CPU indexes are searched by several threads at once, GPU ones in turn."""
    from pipelines.dense.faiss_index import gpu_count, read_index_metadata

    ref = resolve_model(ws, model)
    folder = dense_dir(ws, ref.passage_key) / index_type
    meta = read_index_metadata(folder)
    identity = (ws.table_version("passages"), meta.to_json() if meta is not None else None)
    with _indexes_lock:
        cached = _indexes.get(str(folder))
        if cached is None or cached[0] != identity:
            index = open_model_index(ws, ref, index_type, retriever)
            _indexes[str(folder)] = (identity, _OneSearchAtATime(index) if gpu_count() else index)
        return _indexes[str(folder)][1]


class _RestoreTorchThreads:
    """Tasks on a local runner set torch's thread count of this process; put it back after."""

    def __enter__(self) -> None:
        import torch

        self.threads = torch.get_num_threads()

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.set_num_threads(self.threads)


# --- encoding -------------------------------------------------------------------------------


def read_passage_slice(ws: Workspace, files: list[dict[str, Any]], shard: ShardRange) -> pa.Table:
    """Passages ``[shard.start, shard.stop)`` of the snapshot whose ``passages`` files are ``files``
    (snapshot entries, in table order), reading only the files the range overlaps."""
    from storage.snapshot import FileEntry, Snapshot
    from storage.tables import scan_table

    entries = [FileEntry(**f) for f in files]
    parts: list[pa.RecordBatch] = []
    for span in file_spans([e.rows for e in entries], shard.start, shard.stop):
        one_file = Snapshot(tables={"passages": [entries[span.position]]})
        seen, want_to = 0, span.offset + span.rows
        for batch in scan_table(ws.root, one_file, "passages", PASSAGE_COLUMNS, batch_size=4096):
            lo, hi = max(span.offset - seen, 0), min(want_to - seen, batch.num_rows)
            if lo < hi:
                parts.append(batch.slice(lo, hi - lo))
            seen += batch.num_rows
            if seen >= want_to:
                break
        if seen < want_to:
            raise ValueError(f"{ws.root / entries[span.position].path}: {seen} rows, but the snapshot lists "
                             f"{entries[span.position].rows}")  # fmt: skip
    return pa.Table.from_batches(parts)


def _task_device(shard_index: int) -> str | None:
    """GPUs of the worker's machine in turn (by shard), else the retriever's own choice (CPU)."""
    import torch

    if torch.cuda.is_available():
        return f"cuda:{shard_index % torch.cuda.device_count()}"
    return None


@task(name="dense-encode-shard", tags=["gpu"], cache_policy=NO_CACHE)
def encode_shard_task(
    workspace: str, passage_path: str, shard: dict[str, int], files: list[dict[str, Any]], out_dir: str,
    batch_size: int, precision: str, dtype: str, threads: int | None, model_fingerprint: str,
) -> tuple[Any, str]:  # fmt: skip
    """Encode one planned shard and write its files; returns (its ShardInfo, the device used)."""
    from pipelines.dense.sharded_encoding import (
        as_storage,
        encode_shard,
        iter_corpus_shards,
        resolve_precision,
        shard_columns,
        write_shard,
    )

    _limit_threads(threads)
    ws = Workspace.resolve(workspace)
    planned = ShardRange(**shard)
    device = _task_device(planned.index)
    resolve_precision(precision, [device])  # type: ignore[arg-type]  # refuses fp16 on a worker without a GPU
    try:  # the same column and null checks as the streamed path
        [(_, passages)] = list(iter_corpus_shards([read_passage_slice(ws, files, planned)], planned.count))
    except ValueError as error:
        raise ValueError(f"shard {planned.index} (passages {planned.start}..{planned.stop - 1}): {error}") from error
    retriever, loaded = _thread_retriever(passage_path)
    if loaded != model_fingerprint:
        raise RuntimeError(f"the model at {passage_path} changed during the encoding run (fingerprint "
                           f"{loaded[:12]}, the manifest has {model_fingerprint[:12]}); run the encoding again")
    ids, titles, texts = shard_columns(passages)
    vectors = encode_shard(retriever, titles, texts, batch_size=batch_size, device=device,
                           precision=precision)  # type: ignore[arg-type]  # fmt: skip
    return write_shard(Path(out_dir), planned.index, ids, as_storage(vectors, dtype)), device or "cpu"  # type: ignore[arg-type]


@flow(name="dense-encode-mapped")
def encode_mapped_flow(
    model: str,
    workspace: str | None = None,
    shard_size: int = 50_000,
    batch_size: int = 128,
    dtype: str = "float32",
    precision: str = "auto",
    threads: int | None = None,
    out_dir: str | None = None,
) -> dict[str, Any]:
    """Encode the passages with one task per pending shard on this flow's task runner; the same
    embeddings directory (manifest, shards) as the in-process path writes. `out_dir` defaults to
    the model's embeddings folder (a re-index builds a release folder instead)."""
    from models.retriever import load_retriever
    from pipelines.dense.sharded_encoding import (
        default_devices,
        prepare_out_dir,
        record_shard,
        wanted_manifest,
        write_manifest,
    )

    log = stage_logger()
    ws = Workspace.resolve(workspace)
    ref = resolve_model(ws, model)
    snapshot = ws.snapshot()  # the one snapshot every task reads
    if snapshot.rows("passages") == 0:
        raise ValueError("the passages table is empty: ingest a dump or import passages first")
    files = [asdict(entry) for entry in snapshot.files("passages")]
    out = Path(out_dir) if out_dir else dense_dir(ws, ref.passage_key) / EMBEDDINGS
    retriever = load_retriever(ref.passage_path)  # for what the manifest records about the model
    wanted = wanted_manifest(retriever, snapshot.table_version("passages"), shard_size, batch_size, dtype,  # type: ignore[arg-type]
                             precision, default_devices())  # type: ignore[arg-type]  # fmt: skip
    del retriever
    manifest, restart_reason = prepare_out_dir(out, wanted)
    report = {"model": model, "embeddings": str(out), "dim": manifest.dim, "dtype": manifest.dtype,
              "precision": manifest.precision}  # fmt: skip
    if manifest.complete:
        log.info("%s: embeddings complete for this model and corpus; nothing to encode", out)
        return {**report, "passages": manifest.num_passages, "shards": len(manifest.shards), "encoded_now": 0,
                "tasks": 0, "devices": [], "noop": True}  # fmt: skip
    plan = pending_shards(snapshot.rows("passages"), shard_size, manifest.shards)
    log.info("encode %s: %d shard(s) to encode, %d already finished", model, len(plan), len(manifest.shards))
    encoded, devices, failures = 0, set(), []
    with _RestoreTorchThreads():
        futures = encode_shard_task.map(str(ws.root), ref.passage_path, [asdict(s) for s in plan], unmapped(files),
                                        str(out), batch_size, manifest.precision, dtype, threads,
                                        manifest.model_fingerprint)  # fmt: skip
        planned = {future: shard for future, shard in zip(futures, plan, strict=True)}
        for future in as_completed(list(futures)):
            try:
                info, device = future.result()
            except Exception as error:  # record every shard that did finish, then fail
                failures.append(error)
                continue
            if info.count != planned[future].count:
                raise RuntimeError(f"shard {info.index}: {info.count} passages written, {planned[future].count} planned")
            record_shard(out, manifest, info)
            encoded += info.count
            devices.add(device)
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(plan)} shard task(s) failed; the {len(plan) - len(failures)} "
                           "that finished are recorded and a re-run resumes after them") from failures[0]  # fmt: skip
    manifest.complete = True
    write_manifest(out, manifest)
    report = {**report, "passages": manifest.num_passages, "shards": len(manifest.shards), "encoded_now": encoded,
              "tasks": len(plan), "devices": sorted(devices)}  # fmt: skip
    if restart_reason:
        report["restarted"] = restart_reason
    return {**report, "noop": False}


def encode_on_runner(runner: RunnerSettings, **params: Any) -> dict[str, Any]:
    """`encode_mapped_flow` with the runner's task runner and its thread share per task."""
    return encode_mapped_flow.with_options(task_runner=runner.task_runner())(threads=task_threads(runner), **params)


# --- mining ---------------------------------------------------------------------------------


@task(name="dense-mine-batch", cache_policy=NO_CACHE)
def mine_batch_task(
    workspace: str, model: str, index_type: str, questions: dict[str, list], depth: int, count: int, mode: str,
    threads: int | None,
) -> Any:  # fmt: skip
    """Hard negatives of one batch of questions (a MiningResult): `mine_questions` on the model and
    index this worker holds."""
    _limit_threads(threads)
    ws = Workspace.resolve(workspace)
    retriever, _ = _thread_retriever(resolve_model(ws, model).path)
    index = _process_index(ws, model, index_type, retriever)
    return mine_questions(ws, retriever, index, pa.table(questions), depth, count, mode)


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
) -> Any:
    """Mined negatives (a MiningResult, as `mine_hard_negatives` over the whole split gives) with one
    task per `batch` questions on this flow's task runner."""
    from flows.evaluation import match_mode
    from flows.retrieval import load_questions
    from pipelines.dense.mining import MiningResult

    if batch < 1:
        raise ValueError(f"batch must be positive, got {batch}")
    ws = Workspace.resolve(workspace)
    questions = load_questions(ws, dataset, split, MINE_COLUMNS)
    chunks = [questions.slice(start, batch).to_pydict() for start in range(0, questions.num_rows, batch)]
    with _RestoreTorchThreads():
        futures = mine_batch_task.map(str(ws.root), model, index_type, chunks, depth, count,
                                      match_mode(dataset, "auto"), threads)  # fmt: skip
        parts = futures.result()
    # One sorted list, as mining the whole split at once gives (it orders questions by id).
    negatives = pa.concat_tables([p.negatives for p in parts]).sort_by("question_id")
    return MiningResult(negatives, sum(p.excluded_gold for p in parts), sum(p.excluded_answer for p in parts),
                        sum(p.without_negatives for p in parts), sum(p.unknown_questions for p in parts))  # fmt: skip


def mine_on_runner(runner: RunnerSettings, **params: Any) -> Any:
    """`mine_mapped_flow` with the runner's task runner and its thread share per task."""
    return mine_mapped_flow.with_options(task_runner=runner.task_runner())(threads=task_threads(runner), **params)
