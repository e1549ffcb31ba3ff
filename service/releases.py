"""The releases a search service holds in memory, and the hot swap between them.

Every index build publishes the workspace's current indexes as a release and switches the
pointer (`storage.releases`). A long-running service follows that pointer without ever answering
from a half-loaded index or freeing an index a request is still reading:

* :class:`LoadedRelease` is one release in memory: its searchers (opened, as every searcher is,
  by `models.searchers`, with one encoder cache shared by all releases) and the passage texts,
  with a reference count of the requests using it. Dense search (question encoding + FAISS) and
  BM25 search each run on a :class:`~pipelines.microbatch.MicroBatcher`, so concurrent requests
  share batches; the JVM searcher is only called from one thread.
* :class:`ReleaseHolder` polls the pointer (every second by default; no inotify needed). When it
  names a new release, the holder loads it *beside* the old one, swaps one reference under a
  lock, and frees the old release when its last in-flight request returns. A release that fails
  to load is logged and reported by `health()`; the service stays on the release it had. A
  failed or killed build never moves the pointer, so it changes nothing here.
* A service's holder registers it in the workspace (`storage.serving`) with what it answers
  with, kept up to date on every swap, so that no publish takes a retriever away from it
  (`storage.releases`); `health()` says what it serves and why.

No Prefect here: serving a request must not start a Prefect server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..models.searchers import EncoderCache
from ..models.searchers.release import open_release_bm25, open_release_dense
from ..pipelines.microbatch import MicroBatcher
from ..pipelines.search.bm25_searcher import Bm25Searcher
from ..pipelines.search.dense_searcher import DenseSearcher
from ..pipelines.search.hits import Hits, Ranked
from ..storage import Workspace
from ..storage.choices import IndexType, RetrieverKind
from ..storage.model_registry import ModelRef, resolve_model
from ..storage.passages import passages_by_id
from ..storage.releases import (
    DenseRelease,
    NoReleaseError,
    Release,
    current_hold,
    last_refusal,
    pointer_path,
    read_pointer,
)
from ..storage.serving import ServiceRecord, ServiceRegistration
from ..storage.snapshot import FileEntry

log = logging.getLogger("odqa.serve")

def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def model_display_name(model: str | None) -> str | None:
    """How a release's model is named to clients: a folder's last component, else the id."""
    if not model:
        return None
    return Path(model).name if ("/" in model or os.sep in model) and Path(model).is_dir() else model


@dataclass(frozen=True)
class BatchSettings:
    """Micro-batching knobs: the longest wait for more requests, the largest batch, how many
    question-encoding batches may run at once (each on its own thread, sharing one model), and
    how many questions of one request a BM25 search takes at a time.

    The BM25 searcher is one JVM searcher, so its batches run one after another: without
    slices, a request of 256 questions of 2,000 characters at k=390 held it for 6 s on 2 cores
    (squad24's passages) and a one-question search sent meanwhile waited 5.5-6.0 s; with slices
    of 32, 1.5-1.7 s, the large request taking as long as before. A slice of 32 still gives each
    of the searcher's threads (at most 4) 8 questions a call (`MicroBatcher.slice_items`).
    Dense batches are not sliced: they run on `encoder_workers` workers, and a GPU wants its
    batch whole."""

    max_wait_s: float = 0.005
    max_items: int = 256
    encoder_workers: int = 1
    bm25_slice: int = 32


Batch = list[tuple[str, int]]  # (question, k) of each request in a micro-batch
_worker = threading.local()


def _one_openmp_thread() -> None:
    """FAISS searches of a batch worker use one OpenMP thread: parallelism comes from the workers.
    OpenMP keeps the thread count per calling thread, so each worker sets its own (once); left at
    the default, FAISS regions of two workers beside torch's oversubscribe the cores and their
    spinning barriers stall requests for many seconds on a busy machine."""
    if not getattr(_worker, "openmp_set", False):
        import faiss

        faiss.omp_set_num_threads(1)
        _worker.openmp_set = True


def _per_request(hits: Hits, items: Batch) -> list[Ranked]:
    """Split the hits of one micro-batch (searched at the largest k) back per request."""
    return [found[:k] for found, (_, k) in zip(hits.ranked(), items, strict=True)]


class LoadedRelease:
    """One complete release in memory, reference-counted by the requests using it."""

    def __init__(self, release: Release, dense_entry: DenseRelease | None, dense: DenseSearcher | None,
                 bm25: Bm25Searcher | None, index_type: IndexType | None,
                 passages: dict[str, tuple[str | None, str | None]], batching: BatchSettings,
                 expected: Callable[[], int] | None) -> None:  # fmt: skip
        self.record = release
        self.release = release.release
        self.dense_entry = dense_entry
        self.index_type = index_type
        self.dense_searcher = dense
        self.bm25_searcher = bm25
        self.passages = passages
        self.stored_alpha: float | None = dense_entry.alpha if dense_entry is not None else None
        self.loaded_at = _now()
        self.refs = 0
        self.retired = False
        self.closed = False
        self.freed = threading.Event()  # set once close() has stopped the batchers and dropped the indexes
        self.dense = (MicroBatcher(self._dense_batch, max_wait_s=batching.max_wait_s, max_items=batching.max_items,
                                   expected=expected, name=f"dense-{self.release}", workers=batching.encoder_workers)
                      if dense is not None else None)  # fmt: skip
        self.bm25 = (MicroBatcher(self._bm25_batch, max_wait_s=batching.max_wait_s, max_items=batching.max_items,
                                  expected=expected, name=f"bm25-{self.release}", slice_items=batching.bm25_slice)
                     if bm25 is not None else None)  # fmt: skip

    @property
    def model(self) -> str | None:
        return self.dense_entry.model if self.dense_entry is not None else None

    @property
    def retrievers(self) -> list[RetrieverKind]:
        names: list[RetrieverKind] = [name for name, part in (("bm25", self.bm25), ("dense", self.dense))
                                      if part is not None]  # fmt: skip
        return names + (["hybrid"] if len(names) == 2 else [])

    @property
    def listed_retrievers(self) -> list[RetrieverKind]:
        """What GET /index offers: hybrid only with a tuned alpha in the release, since a hybrid
        request without one is refused (an explicit `alpha` is still accepted)."""
        return [name for name in self.retrievers if name != "hybrid" or self.stored_alpha is not None]

    def describe(self) -> dict[str, Any]:
        """What GET /index shows: the model, index type, passages snapshot, build time, version, the
        retrievers offered and the hybrid alpha in use (None: not tuned, see `listed_retrievers`)."""
        return {"version": self.release, "model": model_display_name(self.model), "index_type": self.index_type,
                "bm25": self.bm25 is not None, "passages_snapshot": self.record.passages_version,
                "passages": len(self.passages), "built_at": self.record.created_at, "loaded_at": self.loaded_at,
                "retrievers": self.listed_retrievers, "hybrid_alpha": self.stored_alpha,
                "models": [model_display_name(entry.model) for entry in self.record.dense]}  # fmt: skip

    def _dense_batch(self, items: Batch) -> list[Ranked]:
        """Encode every question of the batch in one forward pass, then one FAISS search for all.
        Batches may run on several workers at once (see `DenseSearcher`)."""
        _one_openmp_thread()
        return _per_request(self.dense_searcher.search([q for q, _ in items], max(k for _, k in items)), items)  # type: ignore[union-attr]

    def _bm25_batch(self, items: Batch) -> list[Ranked]:
        return _per_request(self.bm25_searcher.search([q for q, _ in items], max(k for _, k in items)), items)  # type: ignore[union-attr]

    def passage(self, passage_id: str) -> tuple[str | None, str | None]:
        return self.passages.get(passage_id, (None, None))

    def close(self) -> None:
        """Stop the batch workers and drop the indexes (called when no request uses it any more)."""
        if self.closed:
            return
        self.closed = True
        for batcher in (self.dense, self.bm25):
            if batcher is not None:
                batcher.close()
        if self.bm25_searcher is not None:
            self.bm25_searcher.close()
        self.dense_searcher = self.bm25_searcher = None
        self.passages = {}
        self.freed.set()
        log.info("freed release %s", self.release)


def release_passages_files(ws: Workspace, release: Release) -> list[FileEntry] | None:
    """The passages files `release` was built from (None: the current table's, for a release an
    older odqa published without naming them; logged when the table has changed since, because
    its texts and ids may then not be the ones its indexes found)."""
    if release.passages_files:
        return release.passages_files
    if ws.table_version("passages") != release.passages_version:
        log.warning("release %s names no passages files (published by an older odqa) and the passages have changed "
                    "since (%s, not %s): it shows the current texts; publish again (odqa reindex) to fix",
                    release.release, ws.table_version("passages"), release.passages_version)  # fmt: skip
    return None


def load_release(ws: Workspace, release: Release, *, model: ModelRef | None, index_type: IndexType | None,
                 encoders: EncoderCache, batching: BatchSettings,
                 expected: Callable[[], int] | None = None) -> LoadedRelease:  # fmt: skip
    """Load a published release (its searchers opened by `models.searchers.release`); any problem
    raises (the caller keeps its old release)."""
    started = time.perf_counter()
    side = open_release_dense(ws, release, model, index_type, encoders)
    dense = side.searcher if side is not None else None
    bm25 = open_release_bm25(ws, release)
    try:
        ids = dense.index.ids if dense is not None else None
        passages = passages_by_id(ws, ids, release_passages_files(ws, release))
        if dense is not None and len(passages) != dense.index.num_vectors:
            raise ValueError(f"release {release.release}: {dense.index.num_vectors} vectors but {len(passages)} of "
                             "their passages in the passages table")  # fmt: skip
        loaded = LoadedRelease(release, side.entry if side else None, dense, bm25, side.index_type if side else None,
                               passages, batching, expected)  # fmt: skip
    except BaseException:
        if bm25 is not None:
            bm25.close()
        raise
    try:  # warm up: the first real request should not pay for lazy initialisation
        for batcher in (loaded.dense, loaded.bm25):
            if batcher is not None:
                batcher.submit([("warm up", 1)]).result(timeout=120)
    except BaseException:
        loaded.close()
        raise
    log.info("loaded release %s (%d passages, retrievers %s) in %.1fs", release.release, len(passages),
             ", ".join(loaded.retrievers), time.perf_counter() - started)  # fmt: skip
    return loaded


class ReleaseHolder:
    """Follows the release pointer: loads each new release beside the old one and swaps atomically.

    Requests take a :meth:`lease`; the release they got stays loaded until the lease ends, even
    when a newer one was swapped in meanwhile.
    """

    def __init__(self, ws: Workspace, *, model: str | None = None, index_type: IndexType | None = None,
                 batching: BatchSettings | None = None, poll_s: float = 1.0,
                 expected: Callable[[], int] | None = None, service: ServiceRecord | None = None) -> None:  # fmt: skip
        self.ws = ws
        # A service registers itself while it runs (`storage.serving`); a plain holder does not.
        self.registration = ServiceRegistration(ws, service) if service is not None else None
        self.model = model
        self.index_type = index_type
        self.batching = batching or BatchSettings()
        self.poll_s = poll_s
        self.expected = expected
        self.encoders = EncoderCache()
        self._current: LoadedRelease | None = None
        self._retiring: list[LoadedRelease] = []
        self._closing: list[threading.Thread] = []  # retired releases being freed (see `lease`)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._seen: tuple[str | None, int | None] = (None, None)  # (release, mtime_ns) last acted on
        self.last_error: dict[str, Any] | None = None
        self.swaps = 0
        self.pointer: str | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Register the service, load what the pointer names now, then keep watching it in a background thread."""
        if self.registration is not None:
            self.registration.register()
        self.check_pointer()
        self._watcher = threading.Thread(target=self._watch, name="release-watcher", daemon=True)
        self._watcher.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        with self._lock:
            everything = [r for r in [self._current, *self._retiring] if r is not None]
            self._current, self._retiring, closing = None, [], self._closing
        for release in everything:
            release.close()
        for thread in closing:
            thread.join(timeout=10)
        if self.registration is not None:
            self.registration.unregister()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check_pointer()
            except Exception:  # the watcher must outlive any surprise; check_pointer logs its own
                log.exception("checking %s failed", pointer_path(self.ws))

    # --- the pointer ----------------------------------------------------------------------------

    def check_pointer(self) -> bool:
        """One poll: load and swap in the release the pointer names if it is new. True on a swap."""
        path = pointer_path(self.ws)
        try:
            mtime = path.stat().st_mtime_ns
            pointed = read_pointer(path)
            wanted = pointed.release if pointed is not None else None
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
            # `--model` is resolved once per release: a model registered after the start is found.
            model = resolve_model(self.ws, self.model) if self.model is not None else None
            fresh = load_release(self.ws, pointed, model=model, index_type=self.index_type,  # type: ignore[arg-type]
                                 encoders=self.encoders, batching=self.batching, expected=self.expected)  # fmt: skip
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
        if self.registration is not None:
            self.registration.update(release=fresh.release, bm25=fresh.bm25 is not None, dense_model=fresh.model)
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
            if free_now:  # off the request's thread (the event loop's): closing waits for its batchers
                closing = threading.Thread(target=release.close, name=f"close-{release.release}", daemon=True)
                closing.start()
                with self._lock:
                    self._closing = [t for t in self._closing if t.is_alive()] + [closing]

    def _no_release_message(self) -> str:
        if self.last_error:
            return f"no index loaded: release {self.last_error['release']} failed to load ({self.last_error['error']})"
        return (f"no index published in {self.ws.root} yet: build one (odqa bm25 index, odqa index build, "
                "odqa reindex); the service picks it up within seconds")  # fmt: skip

    def health(self) -> dict[str, Any]:
        with self._lock:
            current = self._current
            retiring = [{"version": r.release, "in_flight": r.refs} for r in self._retiring]
            in_flight = current.refs if current is not None else 0
        status = "no_index" if current is None else ("degraded" if self.last_error else "ok")
        return {"status": status, "version": current.release if current else None, "pointer": self.pointer,
                "loaded_at": current.loaded_at if current else None, "in_flight": in_flight,
                "retiring": retiring, "swaps": self.swaps, "last_error": self.last_error,
                "serves": self._serves(current), "withheld": self._withheld(), "held": self._held(),
                "registered": self.registration is not None and self.registration.path.is_file(),
                "batching": {name: b.stats.as_dict() for name, b in
                             (("dense", current.dense), ("bm25", current.bm25)) if b is not None} if current else {}}  # fmt: skip

    def _withheld(self) -> dict[str, Any] | None:
        """The last release a publish withheld for narrowing what serves: when, its passages, what it
        lacked and for whom (not the command line that published it: it may name local paths)."""
        refused = last_refusal(self.ws)
        return {key: refused[key] for key in ("at", "passages_version", "lacks")} if refused else None

    def _held(self) -> str | None:
        """What the last rollback holds from being published again (`Hold.describe`), or None."""
        hold = current_hold(self.ws)
        return hold.describe() if hold is not None else None

    def _serves(self, current: LoadedRelease | None) -> dict[str, Any] | None:
        """What the service answers with and why: the release, its retrievers, the default
        retriever, the model questions are encoded with and where that choice comes from, the
        release's default model and whether (and by whom) it is pinned, what it dropped by name."""
        if current is None:
            return None
        record = current.record
        service = self.registration.record if self.registration is not None else None
        return {"release": current.release, "retrievers": current.retrievers,
                "default_retriever": service.retriever if service is not None else None,
                "model": model_display_name(current.model),
                "model_from": None if current.model is None else (
                    f"--model {model_display_name(self.model)}" if self.model is not None else "the release's default model"),
                "default_model": model_display_name(record.default_model), "default_why": record.default_why(),
                "pinned": {"model": model_display_name(record.pinned_model), "by": record.pinned_by}
                if record.pinned_model else None,
                "dropped": record.dropped, "restored_from": record.restored_from}  # fmt: skip
