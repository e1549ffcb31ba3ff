"""Models by path with their fingerprints, loaded once and loaded again when saved anew.

Workers and services outlive training runs, so a cached model is checked against its folder's
files on every use. The flows keep one cache per thread (a model being trained or moved between
devices must not be shared with another thread's work; `loaded_model`); a search service keeps
one for all its encoder workers (a forward pass is safe to share, tokenizing takes a lock).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a model is loaded: a BM25 search never loads one
    from ..base import Retriever

log = logging.getLogger("odqa.models")
MODELS_PER_THREAD = 3  # a pipeline run goes through many models: keep the last few, not all
_local = threading.local()


@dataclass(frozen=True)
class LoadedModel:
    model: Retriever
    fingerprint: str  # config_fingerprint(): what stored embeddings and indexes record


def _files_stamp(path: str) -> tuple:
    """What changes when the model at `path` is saved again (saves replace the folder's files)."""
    folder = Path(path)
    if not folder.is_dir():
        return (path,)
    return tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns, f.stat().st_ino) for f in sorted(folder.iterdir())
                 if f.is_file())  # fmt: skip


class EncoderCache:
    """Loaded models by path, the most recently used last; at most `limit` of them (None: all)."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self._models: dict[str, tuple[tuple, LoadedModel]] = {}
        self._lock = threading.Lock()

    def get(self, path: str) -> LoadedModel:
        """The model at `path`, loaded now when it is not cached or its files changed since."""
        from ..retriever import load_retriever

        with self._lock:
            stamp = _files_stamp(path)
            entry = self._models.pop(path, None)
            if entry is None or entry[0] != stamp:
                started = time.perf_counter()
                model = load_retriever(path)
                entry = (stamp, LoadedModel(model, model.config_fingerprint()))
                log.info("loaded model %s in %.1fs", path, time.perf_counter() - started)
            self._models[path] = entry
            while self.limit is not None and len(self._models) > self.limit:
                self._models.pop(next(iter(self._models)))
            return entry[1]


def thread_encoders() -> EncoderCache:
    """This thread's cache (see the module doc)."""
    cache = getattr(_local, "encoders", None)
    if cache is None:
        cache = _local.encoders = EncoderCache(MODELS_PER_THREAD)
    return cache


def loaded_model(path: str) -> LoadedModel:
    """The model at `path` from this thread's cache."""
    return thread_encoders().get(path)
