"""The releases a search service holds in memory, and the hot swap between them.

`flows.reindex` builds each index release side by side and switches `indexes/current.json` with
one rename. A long-running service must follow that pointer without ever answering from a
half-loaded index or freeing an index a request is still reading:

* :class:`LoadedRelease` is one release in memory: its question encoder, FAISS index, BM25
  searcher and passage texts, with a reference count of the requests using it. Question
  encoding + FAISS search and BM25 search each run on a :class:`~pipelines.microbatch.MicroBatcher`
  worker, so concurrent requests share batches and the JVM searcher and torch module are only
  called from one thread each.
* :class:`ReleaseHolder` polls `current.json` (every second by default; no inotify needed).
  When it names a new release, the holder loads it *beside* the old one, swaps one reference
  under a lock, and frees the old release when its last in-flight request returns. A release
  that fails to load is logged and reported by `health()`; the service stays on the release it
  had. A failed or killed re-index never touches `current.json`, so it changes nothing here.

No Prefect flow runs here: serving a request must not start a Prefect server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flows.reindex import PASSAGE_COLUMNS, RELEASE_FILE, NoReleaseError, current_release, releases_dir
from pipelines.microbatch import MicroBatcher
from storage import Workspace

log = logging.getLogger("odqa.serve")

Hits = list[tuple[str, float]]  # (passage_id, score), best first


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def model_display_name(model: str | None) -> str | None:
    """How a release's model is named to clients: a folder's last component, else the id."""
    if not model:
        return None
    return Path(model).name if ("/" in model or os.sep in model) and Path(model).is_dir() else model


@dataclass(frozen=True)
class BatchSettings:
    """Micro-batching knobs: the longest wait for more requests, the largest batch, and how many
    question-encoding batches may run at once (each on its own thread, sharing one model)."""

    max_wait_s: float = 0.005
    max_items: int = 256
    encoder_workers: int = 1


class EncoderCache:
    """Question encoders by model path, loaded once and shared by every release that uses them."""

    def __init__(self) -> None:
        self._encoders: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, path: str):
        with self._lock:
            if path not in self._encoders:
                from models.retriever import load_retriever

                started = time.perf_counter()
                self._encoders[path] = load_retriever(path)
                log.info("loaded question encoder %s in %.1fs", path, time.perf_counter() - started)
            return self._encoders[path]


class LoadedRelease:
    """One complete release in memory, reference-counted by the requests using it."""

    def __init__(self, record: dict[str, Any], encoder, dense_index, bm25_searcher,
                 passages: dict[str, tuple[str | None, str | None]], batching: BatchSettings,
                 expected: Callable[[], int] | None) -> None:  # fmt: skip
        self.record = record
        self.release: str = record["release"]
        self.encoder = encoder
        self.dense_index = dense_index
        self.bm25_searcher = bm25_searcher
        self.passages = passages
        self.stored_alpha: float | None = None  # the model's tuned hybrid alpha, set by load_release
        self.loaded_at = _now()
        self.refs = 0
        self.retired = False
        self.closed = False
        self.dense = (MicroBatcher(self._dense_batch, max_wait_s=batching.max_wait_s, max_items=batching.max_items,
                                   expected=expected, name=f"dense-{self.release}", workers=batching.encoder_workers)
                      if dense_index is not None else None)  # fmt: skip
        self._tokenize_lock = threading.Lock()
        self.bm25 = (MicroBatcher(self._bm25_batch, max_wait_s=batching.max_wait_s, max_items=batching.max_items,
                                  expected=expected, name=f"bm25-{self.release}")
                     if bm25_searcher is not None else None)  # fmt: skip

    @property
    def retrievers(self) -> list[str]:
        names = [name for name, part in (("bm25", self.bm25), ("dense", self.dense)) if part is not None]
        return names + (["hybrid"] if len(names) == 2 else [])

    def describe(self) -> dict[str, Any]:
        """What GET /index shows: the model, index type, passages snapshot, build time, version."""
        return {"version": self.release, "model": model_display_name(self.record.get("model")),
                "index_type": self.record.get("index_type"), "bm25": self.bm25 is not None,
                "passages_snapshot": self.record.get("passages_version"), "passages": len(self.passages),
                "built_at": self.record.get("created_at"), "loaded_at": self.loaded_at,
                "retrievers": self.retrievers}  # fmt: skip

    def _dense_batch(self, items: list[tuple[str, int]]) -> list[Hits]:
        """Encode every question of the batch in one forward pass, then one FAISS search for all.

        Batches may run on several workers at once: the model's forward is safe to share, a fast
        tokenizer is not (it keeps per-call padding state), so tokenising takes a lock."""
        import torch

        with self._tokenize_lock:
            inputs = self.encoder.tokenize_questions([question for question, _ in items])
        with torch.inference_mode():
            device = self.encoder.device
            vectors = self.encoder.embed_questions({k: v.to(device) for k, v in inputs.items()}).float().cpu().numpy()
        scores, ids = self.dense_index.search(vectors, max(k for _, k in items))
        return [[(pid, float(s)) for pid, s in zip(id_row[:k], score_row[:k], strict=True) if pid is not None]
                for (_, k), id_row, score_row in zip(items, ids, scores, strict=True)]  # fmt: skip

    def _bm25_batch(self, items: list[tuple[str, int]]) -> list[Hits]:
        qids = [str(i) for i in range(len(items))]
        found = self.bm25_searcher.search_batch([q for q, _ in items], qids, k=max(k for _, k in items),
                                                threads=min(4, os.cpu_count() or 1))  # fmt: skip
        return [found.get(qid, [])[:k] for qid, (_, k) in zip(qids, items, strict=True)]

    def passage(self, passage_id: str) -> tuple[str | None, str | None]:
        return self.passages.get(passage_id, (None, None))

    def close(self) -> None:
        """Stop the batch workers and drop the index (called when no request uses it any more)."""
        if self.closed:
            return
        self.closed = True
        for batcher in (self.dense, self.bm25):
            if batcher is not None:
                batcher.close()
        if self.bm25_searcher is not None:
            self.bm25_searcher.close()
        self.dense_index = self.bm25_searcher = None
        self.passages = {}
        log.info("freed release %s", self.release)


def _read_passages(ws: Workspace, ids: pa.Array | None) -> dict[str, tuple[str | None, str | None]]:
    """Title and text of the release's passages (all passages when the release has no id list)."""
    flt = pc.field("passage_id").isin(ids) if ids is not None else None
    table = ws.read_table("passages", columns=PASSAGE_COLUMNS, filter=flt)
    return dict(zip(table.column("passage_id").to_pylist(),
                    zip(table.column("title").to_pylist(), table.column("text").to_pylist(), strict=True),
                    strict=True))  # fmt: skip


def load_release(ws: Workspace, release: str, *, model: str | None, encoders: EncoderCache,
                 batching: BatchSettings, expected: Callable[[], int] | None = None) -> LoadedRelease:  # fmt: skip
    """Load a complete release folder; any problem raises (the caller keeps its old release).

    `model` is the question encoder to use (default: the release's own model); it must be the
    release's model or a query-side fine-tune of it (its passage side made the index)."""
    from flows.dense import resolve_model
    from pipelines.dense.faiss_index import open_index as open_dense
    from pipelines.retrieval.bm25 import Bm25Searcher
    from pipelines.retrieval.bm25 import open_index as open_bm25

    started = time.perf_counter()
    folder = releases_dir(ws) / release
    record_path = folder / RELEASE_FILE
    if not record_path.is_file():
        raise FileNotFoundError(f"release {release}: {record_path} is missing (not a complete release)")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    if record.get("release") != release:
        raise ValueError(f"release {release}: {RELEASE_FILE} names release {record.get('release')!r}")
    encoder = dense_index = None
    if record.get("index_type"):
        ref = resolve_model(ws, model or record["model"])
        if ref.passage_name != record["model"] and ref.passage_path != record["model"]:
            raise ValueError(f"release {release} was encoded with {record['model']!r}; the question encoder "
                             f"{ref.name!r} belongs to {ref.passage_name!r}")  # fmt: skip
        encoder = encoders.get(ref.path)
        dense_index = open_dense(folder / record["index_type"])
    bm25_searcher = Bm25Searcher(open_bm25(folder / "bm25")) if record.get("bm25") else None
    try:
        passages = _read_passages(ws, dense_index.ids if dense_index is not None else None)
        if dense_index is not None and len(passages) != dense_index.num_vectors:
            raise ValueError(f"release {release}: {dense_index.num_vectors} vectors but {len(passages)} of their "
                             "passages in the passages table")  # fmt: skip
        loaded = LoadedRelease(record, encoder, dense_index, bm25_searcher, passages, batching, expected)
    except BaseException:
        if bm25_searcher is not None:
            bm25_searcher.close()
        raise
    if dense_index is not None and bm25_searcher is not None:
        from flows.dense import stored_alpha

        loaded.stored_alpha = stored_alpha(ws, resolve_model(ws, record["model"]))
    try:  # warm up: the first real request should not pay for lazy initialisation
        for batcher in (loaded.dense, loaded.bm25):
            if batcher is not None:
                batcher.submit([("warm up", 1)]).result(timeout=120)
    except BaseException:
        loaded.close()
        raise
    log.info("loaded release %s (%d passages, retrievers %s) in %.1fs", release, len(passages),
             ", ".join(loaded.retrievers), time.perf_counter() - started)  # fmt: skip
    return loaded


class ReleaseHolder:
    """Follows `current.json`: loads each new release beside the old one and swaps atomically.

    Requests take a :meth:`lease`; the release they got stays loaded until the lease ends, even
    when a newer one was swapped in meanwhile.
    """

    def __init__(self, ws: Workspace, *, model: str | None = None, batching: BatchSettings | None = None,
                 poll_s: float = 1.0, expected: Callable[[], int] | None = None) -> None:  # fmt: skip
        self.ws = ws
        self.model = model
        self.batching = batching or BatchSettings()
        self.poll_s = poll_s
        self.expected = expected
        self.encoders = EncoderCache()
        self._current: LoadedRelease | None = None
        self._retiring: list[LoadedRelease] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._seen: tuple[str | None, int | None] = (None, None)  # (release, mtime_ns) last acted on
        self.last_error: dict[str, Any] | None = None
        self.swaps = 0
        self.pointer: str | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Load what `current.json` names now, then keep watching it in a background thread."""
        self.check_pointer()
        self._watcher = threading.Thread(target=self._watch, name="release-watcher", daemon=True)
        self._watcher.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        with self._lock:
            everything = [r for r in [self._current, *self._retiring] if r is not None]
            self._current, self._retiring = None, []
        for release in everything:
            release.close()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check_pointer()
            except Exception:  # the watcher must outlive any surprise; check_pointer logs its own
                log.exception("checking %s failed", self.ws.indexes_dir / "current.json")

    # --- the pointer ----------------------------------------------------------------------------

    def check_pointer(self) -> bool:
        """One poll: load and swap in the release `current.json` names if it is new. True on a swap."""
        path = self.ws.indexes_dir / "current.json"
        try:
            mtime = path.stat().st_mtime_ns
            wanted = (current_release(self.ws) or {}).get("release")
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as error:
            self._failed(None, f"cannot read {path}: {error}")
            return False
        self.pointer = wanted
        loaded = self._current.release if self._current is not None else None
        if not wanted or wanted == loaded or (wanted, mtime) == self._seen:
            return False
        self._seen = (wanted, mtime)
        try:
            fresh = load_release(self.ws, wanted, model=self.model, encoders=self.encoders,
                                 batching=self.batching, expected=self.expected)  # fmt: skip
        except Exception as error:
            self._failed(wanted, f"{type(error).__name__}: {error}")
            return False
        self._swap(fresh)
        return True

    def _failed(self, release: str | None, message: str) -> None:
        kept = self._current.release if self._current is not None else None
        log.error("release %s failed to load (%s); still serving %s", release, message, kept or "nothing")
        self.last_error = {"release": release, "error": message, "at": _now(), "kept": kept}

    def _swap(self, fresh: LoadedRelease) -> None:
        with self._lock:
            old, self._current = self._current, fresh
            self.swaps += 1
            free_now = False
            if old is not None:
                old.retired = True
                free_now = old.refs == 0
                if not free_now:
                    self._retiring.append(old)
        self.last_error = None
        log.info("switched to release %s (was %s)", fresh.release, old.release if old else "none")
        if free_now:
            old.close()

    # --- requests -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lease(self) -> Iterator[LoadedRelease]:
        """The current release, kept loaded until the block ends."""
        with self._lock:
            release = self._current
            if release is None:
                raise NoReleaseError(self._no_release_message())
            release.refs += 1
        try:
            yield release
        finally:
            with self._lock:
                release.refs -= 1
                free_now = release.retired and release.refs == 0
                if free_now:
                    self._retiring.remove(release)
            if free_now:
                release.close()

    def _no_release_message(self) -> str:
        if self.last_error:
            return f"no index loaded: release {self.last_error['release']} failed to load ({self.last_error['error']})"
        return (f"no index release in {self.ws.root} yet: run a re-index (the reindex flow or deployment); "
                "the service picks it up within seconds")  # fmt: skip

    def health(self) -> dict[str, Any]:
        with self._lock:
            current = self._current
            retiring = [{"version": r.release, "in_flight": r.refs} for r in self._retiring]
            in_flight = current.refs if current is not None else 0
        status = "no_index" if current is None else ("degraded" if self.last_error else "ok")
        return {"status": status, "version": current.release if current else None, "pointer": self.pointer,
                "loaded_at": current.loaded_at if current else None, "in_flight": in_flight,
                "retiring": retiring, "swaps": self.swaps, "last_error": self.last_error,
                "batching": {name: b.stats.as_dict() for name, b in
                             (("dense", current.dense), ("bm25", current.bm25)) if b is not None} if current else {}}  # fmt: skip
