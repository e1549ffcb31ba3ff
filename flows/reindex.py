"""Re-indexing: new passages in, a complete new BM25 + FAISS index out, switched atomically.

Layout under `<workspace>/indexes/`:

    releases/<release>/bm25/          Lucene index of the passages at that release
    releases/<release>/embeddings/    passage vectors of the production model
    releases/<release>/<type>/        FAISS index (flat by default)
    releases/<release>/release.json   model, passages version, counts, timings
    current.json                      {"release": ..., ...} -- the pointer searches follow

A re-index ingests a new dump or a passages delta, then builds a release side by side with the
one being served, in a hidden folder that is renamed into place only when complete, and then
replaces `current.json` with one atomic rename. A search reads the pointer once and uses that
release throughout, so during a re-index it is answered from the old, complete release and
afterwards from the new one; it never sees a half-built index. The previous releases are kept
(`keep`) so searches that started on them finish. Each re-index is a Prefect flow run, and its
figures (passages, documents, vectors, build times) are rows of the `metrics` table under the
run name `reindex:<release>`.

Re-indexes are incremental. A new dump is diffed page by page against the previous ingest (page
id + content hash, kept in `indexes/reindex/pages.parquet`): only new and changed pages are
cleaned again, the rows of unchanged ones are copied, removed ones disappear
(`pipelines.wikipedia.page_diff`). Encoding then reuses the vectors of every passage whose id,
title and text the current release already encoded with the same model
(`pipelines.dense.passage_diff`), so only new and changed passages are encoded. BM25 and FAISS
are rebuilt from the passages and from reused + new vectors; the release is the one a full
rebuild gives (same ids in the same order, vectors up to float rounding). The counts (pages
re-cleaned / reused / removed, passages re-encoded / reused / removed) are figures of the run.

Two re-indexes never overlap: a workspace file lock (`indexes/.reindex.lock`) is taken for the
whole run; a second one waits up to `wait_seconds` and is then refused with a message that says
which run holds the lock since when.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from prefect import flow, task

from flows.runtime import stage_logger
from flows.task_runners import RunnerSettings, mapping_runner
from storage import Workspace
from storage.fingerprint import fingerprint
from storage.snapshot import atomic_write_text

RELEASES_DIR = "releases"
POINTER_FILE = "current.json"
LOCK_FILE = ".reindex.lock"
RELEASE_FILE = "release.json"
PAGES_DIR = "reindex"  # under indexes/: the page hashes of the last dump ingested by a re-index
PAGES_FILE = "pages.parquet"
PAGES_META = "pages.json"
PASSAGE_COLUMNS = ["passage_id", "title", "text"]


class ReindexBusyError(RuntimeError):
    """Another re-index holds the workspace's re-index lock."""


class NoReleaseError(FileNotFoundError):
    """No release has been switched in yet."""


# --- pointer and releases --------------------------------------------------------------------


def releases_dir(ws: Workspace) -> Path:
    path = ws.indexes_dir / RELEASES_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def pointer_path(ws: Workspace) -> Path:
    return ws.indexes_dir / POINTER_FILE


def current_release(ws: Workspace) -> dict[str, Any] | None:
    """What `current.json` points at (None before the first re-index)."""
    try:
        return json.loads(pointer_path(ws).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def switch_current(ws: Workspace, release: dict[str, Any]) -> None:
    """Point searches at `release` (one rename: readers see the old or the new pointer)."""
    atomic_write_text(pointer_path(ws), json.dumps(release, indent=2, sort_keys=True))


def prune_releases(ws: Workspace, keep: int) -> list[str]:
    """Delete all but the newest `keep` releases (never the current one)."""
    current = (current_release(ws) or {}).get("release")
    done = sorted((p for p in releases_dir(ws).iterdir() if p.is_dir() and not p.name.startswith(".")),
                  key=lambda p: p.name)  # fmt: skip
    removed = []
    for path in done[: max(0, len(done) - max(keep, 1))]:
        if path.name != current:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


@contextlib.contextmanager
def reindex_lock(ws: Workspace, wait_seconds: float = 0.0, holder: str = "") -> Iterator[None]:
    """Exclusive re-index lock; waits up to `wait_seconds`, then ReindexBusyError."""
    path = ws.indexes_dir / LOCK_FILE
    with open(path, "a+", encoding="utf-8") as handle:
        deadline = time.monotonic() + max(0.0, wait_seconds)
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    who = handle.read().strip() or "another process"
                    raise ReindexBusyError(
                        f"a re-index of {ws.root} is already running ({who}); this one was refused after "
                        f"waiting {wait_seconds:.0f}s. Wait for it to finish, or pass a longer wait_seconds."
                    ) from None
                time.sleep(0.2)
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()}{', ' + holder if holder else ''}, since "
                         f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}")  # fmt: skip
            handle.flush()
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def production_model(ws: Workspace, model: str | None) -> str:
    """The model to encode with: as given, else the current release's, else the newest trained."""
    if model:
        return model
    current = current_release(ws)
    if current and current.get("model"):
        return current["model"]
    if ws.rows("models"):
        rows = ws.sql("SELECT model_id FROM models ORDER BY created_at DESC LIMIT 1").to_pylist()
        if rows:
            return rows[0]["model_id"]
    raise ValueError("no production model: pass `model` (a model id, Hugging Face name or folder)")


# --- incremental ingest -----------------------------------------------------------------------


def _pages_dir(ws: Workspace) -> Path:
    return ws.indexes_dir / PAGES_DIR


def _previous_pages(ws: Workspace, options_fp: str) -> Any:
    """The page hashes of the ingest that made the current tables, or None when they do not
    describe them (another ingest ran since, other options, none yet): then every page is cleaned."""
    from pipelines.wikipedia.page_diff import PageHashes

    meta_path, pages_path = _pages_dir(ws) / PAGES_META, _pages_dir(ws) / PAGES_FILE
    if not meta_path.is_file() or not pages_path.is_file() or ws.rows("passages") == 0:
        return None
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("passages_version") != ws.table_version("passages") or meta.get("options") != options_fp:
        return None
    return PageHashes.read(pages_path)


def ingest_dump_incremental(ws: Workspace, dump: Path, words_per_passage: int = 100) -> dict[str, Any]:
    """The Wikipedia ingest stage (same stage, fingerprint and rows as `odqa ingest wikipedia`),
    cleaning only the pages that changed since the previous re-index's dump."""
    from flows.wikipedia import STAGE, dump_fingerprint, ingest_dump
    from pipelines.wikipedia.ingest import IngestOptions, iter_raw_chunks
    from pipelines.wikipedia.page_diff import (
        DiffCounts,
        PageHashes,
        PageHashWriter,
        PreviousRows,
        diff_chunks,
    )
    from storage.tables import table_dataset

    options = IngestOptions(words_per_passage=words_per_passage)
    options_fp = fingerprint({k: v for k, v in asdict(options).items() if k != "workers"})
    stage_fp = dump_fingerprint(dump, options)
    if ws.stage_is_current(STAGE, stage_fp):
        record = ws.stage_record(STAGE)
        return {**(record.report if record else {}), "noop": True}
    previous = _previous_pages(ws, options_fp)
    old = None
    if previous is not None:
        snapshot = ws.snapshot()
        old = PreviousRows(*(table_dataset(ws.root, snapshot, t) for t in ("articles", "passages", "category_links")))
    counts = DiffCounts()
    writer = PageHashWriter(_pages_dir(ws) / PAGES_FILE)

    def chunks(start: int):
        raw = iter_raw_chunks(dump, options, start_chunk=start)
        return diff_chunks(raw, options, previous or PageHashes.empty(), old, counts, writer if start == 0 else None)

    try:
        report = ingest_dump(ws, dump, options, stage_fp, chunks=chunks)
    except BaseException:
        writer.abort()
        raise
    if report.get("resumed_chunks"):  # the hashes miss the chunks an earlier attempt wrote
        writer.abort()
        (_pages_dir(ws) / PAGES_META).unlink(missing_ok=True)
    else:
        writer.commit()
        atomic_write_text(_pages_dir(ws) / PAGES_META, json.dumps(
            {"passages_version": ws.table_version("passages"), "options": options_fp, "dump": str(dump)}))
    report.update({"pages_recleaned": counts.recleaned, "pages_reused": counts.reused,
                   "pages_removed": counts.removed(previous) if previous is not None else 0,
                   "incremental": previous is not None})  # fmt: skip
    return {**report, "noop": False}


# --- building a release -----------------------------------------------------------------------


def _passage_records(ws: Workspace) -> Iterator[tuple[str, str | None, str | None]]:
    for batch in ws.scan("passages", columns=PASSAGE_COLUMNS):
        yield from zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True)


@task(name="reindex-bm25")
def build_bm25_task(workspace: str, target: str, passages_version: str, threads: int) -> dict[str, Any]:
    from pipelines.retrieval.bm25 import build_index

    ws = Workspace.resolve(workspace)
    info = build_index(_passage_records(ws), Path(target), snapshot=passages_version, threads=threads)
    return {"bm25_documents": info.documents, "bm25_seconds": info.build_seconds}


@task(name="reindex-encode", tags=["gpu"])
def encode_task(workspace: str, model: str, target: str, passages_version: str, batch_size: int,
                shard_size: int, previous: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Encode the release's passages, reusing the vectors of `previous` (the current release's
    embeddings) for passages it holds unchanged, encoded by the same model."""
    from flows.dense import resolve_model
    from pipelines.dense.passage_diff import VectorReuse, write_keys
    from pipelines.dense.sharded_encoding import default_devices, encode_corpus, wanted_manifest

    ws = Workspace.resolve(workspace)
    ref = resolve_model(ws, model)
    started = time.perf_counter()
    retriever = _load_retriever(ref.passage_path)
    devices = default_devices()
    reuse = VectorReuse.open(previous, wanted_manifest(retriever, passages_version, shard_size, batch_size, "float32",
                                                       "auto", devices))  # fmt: skip
    result = encode_corpus(retriever, ws.scan("passages", columns=PASSAGE_COLUMNS, batch_size=4096), Path(target),
                           corpus_fingerprint=passages_version, shard_size=shard_size, batch_size=batch_size,
                           devices=devices, total=ws.rows("passages"), reuse=reuse)  # fmt: skip
    write_keys(target, ws.scan("passages", columns=PASSAGE_COLUMNS, batch_size=4096))
    seconds = time.perf_counter() - started
    passages = result.manifest.num_passages
    figures = {"encoded_passages": passages, "encode_seconds": round(seconds, 3),
               "passages_per_second": round(passages / seconds, 1) if seconds else None,
               "reencoded_passages": result.encoded_passages - result.reused_passages,
               "reused_passages": result.reused_passages, "removed_passages": 0,
               "model_fingerprint": retriever.config_fingerprint()}  # fmt: skip
    if reuse is not None:
        from pipelines.dense.sharded_encoding import EncodedCorpus

        kept = reuse.ids_kept(EncodedCorpus(target).ids())
        figures["removed_passages"] = reuse.previous_count() - kept
    return figures


def _encode_release(ws: Workspace, model: str, target: str, passages_version: str, batch_size: int, shard_size: int,
                    runner: RunnerSettings | None, previous: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The release's embeddings: in process (`encode_task`, reusing `previous` vectors), or one
    mapped task per shard on the runner (or the Dask cluster of `$ODQA_DASK_ADDRESS`), which
    encodes every passage; the same vectors either way."""
    from flows.dense_parallel import encode_on_runner
    from pipelines.dense.passage_diff import write_keys
    from pipelines.dense.sharded_encoding import read_manifest

    runner = mapping_runner(runner)
    if runner is None:
        return encode_task(str(ws.root), model, target, passages_version, batch_size, shard_size, previous)
    started = time.perf_counter()
    report = encode_on_runner(runner, model=model, workspace=str(ws.root), shard_size=shard_size,
                              batch_size=batch_size, out_dir=target)  # fmt: skip
    seconds = time.perf_counter() - started
    manifest = read_manifest(target)
    if manifest is None or manifest.corpus_fingerprint != passages_version:
        raise RuntimeError(f"the passages changed while re-indexing (expected snapshot {passages_version}); run it again")
    write_keys(target, ws.scan("passages", columns=PASSAGE_COLUMNS, batch_size=4096))
    passages = report["passages"]
    return {"encoded_passages": passages, "encode_seconds": round(seconds, 3),
            "passages_per_second": round(passages / seconds, 1) if seconds else None,
            "model_fingerprint": manifest.model_fingerprint}  # fmt: skip


@task(name="reindex-faiss", tags=["gpu"])
def build_faiss_task(embeddings: str, target: str, index_type: str, memory_gb: float | None = None) -> dict[str, Any]:
    """The release's FAISS index, planned first (logged; parts sized to `memory_gb`)."""
    from flows.dense import planned_build

    started = time.perf_counter()
    meta = planned_build(Path(embeddings), Path(target), index_type, None, memory_gb)
    return {"dense_vectors": meta.num_vectors, "faiss_seconds": round(time.perf_counter() - started, 3),
            "faiss_parts": len(meta.parts)}  # fmt: skip


def _metric_rows(release: str, figures: dict[str, Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    created = datetime.now(timezone.utc)
    text = json.dumps(config, sort_keys=True, default=str)
    return [{"run": f"reindex:{release}", "dataset": "", "split": "", "metric": name, "value": float(value),
             "group": "", "created_at": created, "config": text}
            for name, value in figures.items() if isinstance(value, (int, float)) and not isinstance(value, bool)]  # fmt: skip


@flow(name="reindex")
def reindex_flow(
    workspace: str | None = None,
    dump: str | None = None,
    passages: str | None = None,
    passages_format: str = "dpr-tsv",
    model: str | None = None,
    index_type: str = "flat",
    bm25: bool = True,
    dense: bool = True,
    wait_seconds: float = 0.0,
    keep: int = 3,
    threads: int | None = None,
    batch_size: int = 64,
    shard_size: int = 50_000,
    runner: RunnerSettings | None = None,
    memory_gb: float | None = None,
) -> dict[str, Any]:
    """Ingest a new dump or passages delta, build BM25 + FAISS side by side, switch `current`.

    Incremental (see the module doc): only changed pages are cleaned and only new or changed
    passages encoded. The passages are encoded in process, or with a runner (or
    `$ODQA_DASK_ADDRESS`) one task per shard on it (see `flows.dense.encode_flow`), which
    encodes all of them. `memory_gb` bounds the FAISS build (see `odqa index plan`).

    Args:
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        dump: A new MediaWiki XML dump to ingest first (only changed pages are cleaned again);
            empty: none.
        passages: A passages file (delta) to import first; empty: none.
        passages_format: Format of passages: dpr-tsv or beir.
        model: Model that encodes the passages; empty: the model of the release being served,
            else the newest trained one.
        index_type: FAISS index type: flat, hnsw or ivfpq.
        bm25: Build the BM25 (Lucene) index of the release.
        dense: Encode the passages and build the FAISS index of the release.
        wait_seconds: How long to wait for a re-index that holds the workspace's lock before
            giving up.
        keep: Newest releases kept on disk (the current one always), so searches that started on
            an older one finish; older ones are deleted.
        threads: BM25 indexing threads; empty: one per CPU core.
        batch_size: Passages per encoding batch.
        shard_size: Passages per encoding shard (the unit of work on a runner and of resumption).
        runner: Encode shards as tasks on this task runner (threads, processes or a Dask cluster);
            empty: in process, or on $ODQA_DASK_ADDRESS's cluster when set.
        memory_gb: Memory budget of the FAISS build in GB; empty: no limit.
    """
    log = stage_logger()
    ws = Workspace.resolve(workspace)
    if not (bm25 or dense):
        raise ValueError("nothing to build: enable bm25 and/or dense")
    from prefect.runtime import flow_run

    holder = f"flow run {flow_run.get_name() or flow_run.get_id() or '?'}"
    with reindex_lock(ws, wait_seconds, holder):
        ingested: dict[str, Any] = {}
        if dump:
            from flows.wikipedia import ingest_wikipedia_flow

            if Path(dump).expanduser().is_file():
                ingested["dump"] = ingest_dump_incremental(ws, Path(dump).expanduser().resolve())
            else:
                ingested["dump"] = ingest_wikipedia_flow(dump=dump, workspace=str(ws.root))  # its error message
        if passages:
            from flows.passages import import_passages_flow

            ingested["passages"] = import_passages_flow(fmt=passages_format, path=passages, workspace=str(ws.root))
        if ws.rows("passages") == 0:
            raise ValueError("the passages table is empty: give a dump or passages to ingest")
        version = ws.table_version("passages")
        chosen = production_model(ws, model) if dense else None
        current = current_release(ws)
        if current and current.get("passages_version") == version and current.get("model") == chosen \
                and current.get("bm25") == bm25 and current.get("index_type") == (index_type if dense else None):
            log.info("release %s already serves passages %s with model %s (no-op)", current["release"], version, chosen)
            return {**current, "noop": True}
        release = f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%fZ')}-{version[:8]}"
        building = releases_dir(ws) / f".{release}.building"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        figures: dict[str, Any] = {"passages": ws.rows("passages")}
        for name in ("pages_recleaned", "pages_reused", "pages_removed"):
            if name in ingested.get("dump", {}):
                figures[name] = ingested["dump"][name]
        previous = None
        if current and current.get("model") == chosen and current.get("index_type"):
            previous = str(releases_dir(ws) / current["release"] / "embeddings")
        try:
            if bm25:
                figures.update(build_bm25_task(str(ws.root), str(building / "bm25"), version,
                                               threads or os.cpu_count() or 1))  # fmt: skip
            if dense:
                figures.update(_encode_release(ws, chosen, str(building / "embeddings"), version, batch_size,
                                               shard_size, runner, previous))  # fmt: skip
                figures.update(build_faiss_task(str(building / "embeddings"), str(building / index_type), index_type,
                                                memory_gb))  # fmt: skip
            record = {"release": release, "passages_version": version, "model": chosen, "bm25": bm25,
                      "index_type": index_type if dense else None,
                      "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), **figures}  # fmt: skip
            (building / RELEASE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
            final = releases_dir(ws) / release
            building.rename(final)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        with ws.transaction(f"reindex:{release}") as tx:
            tx.write("metrics", _metric_rows(release, figures, {"model": chosen, "index_type": index_type,
                                                                 "ingested": ingested}),
                     source=f"reindex:{release}")  # fmt: skip
            tx.report = record
        switch_current(ws, record)
        removed = prune_releases(ws, keep)
    _publish(record)
    log.info("re-index %s switched in (%s); removed old releases: %s", release, figures, removed or "none")
    return {**record, "previous": (current or {}).get("release"), "removed": removed, "noop": False}


def _publish(record: dict[str, Any]) -> None:
    from flows.artifacts import publish_table

    rows = [{"figure": k, "value": v} for k, v in record.items() if k not in ("bm25",)]
    publish_table(f"reindex-{record['release']}", f"Re-index {record['release']}", rows)


# --- searching the current release ------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _load_retriever(path: str):
    from models.retriever import load_retriever

    return load_retriever(path)


@functools.lru_cache(maxsize=4)
def _dense_index(index_dir: str):
    from pipelines.dense.faiss_index import open_index

    return open_index(Path(index_dir), mmap=None)  # budget-split indexes are searched memory-mapped


def search_current(
    questions: list[str], k: int = 10, retriever: str = "bm25", workspace: str | None = None
) -> list[list[dict[str, Any]]]:
    """Top-k passages of each question from the release `current.json` names.

    The pointer is read once, so one call is answered from one complete release even when a
    re-index switches the pointer meanwhile.
    """
    ws = Workspace.resolve(workspace)
    release = current_release(ws)
    if release is None:
        raise NoReleaseError(f"no index release in {ws.root}: run a re-index first (odqa reindex / reindex flow)")
    folder = releases_dir(ws) / release["release"]
    if retriever == "bm25":
        hits = _bm25_hits(folder / "bm25", questions, k)
    elif retriever == "dense":
        if not release.get("index_type"):
            raise ValueError(f"release {release['release']} has no dense index")
        hits = _dense_hits(folder / release["index_type"], release["model"], ws, questions, k)
    else:
        raise ValueError(f"retriever must be bm25 or dense, got {retriever!r}")
    ids = pa.array(sorted({pid for row in hits for pid, _ in row}), pa.string())
    passages = ws.read_table("passages", columns=PASSAGE_COLUMNS, filter=pc.field("passage_id").isin(ids))
    by_id = {row["passage_id"]: row for row in passages.to_pylist()}
    return [[{"rank": rank, "passage_id": pid, "score": float(score), "title": by_id.get(pid, {}).get("title"),
              "text": by_id.get(pid, {}).get("text"), "release": release["release"]}
             for rank, (pid, score) in enumerate(row, start=1)] for row in hits]  # fmt: skip


def _bm25_hits(index: Path, questions: list[str], k: int) -> list[list[tuple[str, float]]]:
    from pipelines.retrieval.bm25 import Bm25Searcher, open_index

    searcher = Bm25Searcher(open_index(index))
    try:
        qids = [str(i) for i in range(len(questions))]
        found = searcher.search_batch(questions, qids, k=k, threads=1)
    finally:
        searcher.close()
    return [found.get(q, []) for q in qids]


def _dense_hits(index_dir: Path, model: str, ws: Workspace, questions: list[str], k: int) -> list[list[tuple[str, float]]]:
    from flows.dense import resolve_model

    encoder = _load_retriever(resolve_model(ws, model).path)
    scores, ids = _dense_index(str(index_dir)).search(encoder.encode_questions(questions), k)
    return [[(pid, s) for pid, s in zip(id_row, score_row, strict=True) if pid is not None]
            for id_row, score_row in zip(ids, scores, strict=True)]  # fmt: skip
