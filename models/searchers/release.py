"""A published release's searchers, as a long-running search service opens them.

A release (`storage.releases`) names the index folders of one passages version; the service
searches those folders, not the workspace's current builds, so that a re-index in progress never
changes what it answers from. The dense side is the release's default model or the one asked for
(its own index, or its passage model's for a query-side fine-tune), searched with the asked index
type or the first of `INDEX_TYPES` the release has; its index must carry the fingerprint of the
passage encoder now at the model's path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...storage.choices import INDEX_TYPES, IndexType
from ...storage.model_registry import ModelRef
from ...storage.releases import DenseRelease, Release
from ...storage.workspace import Workspace
from .encoders import EncoderCache

if TYPE_CHECKING:
    from ...pipelines.search.bm25_searcher import Bm25Searcher
    from ...pipelines.search.dense_searcher import DenseSearcher


@dataclass(frozen=True)
class ReleaseDense:
    """The dense side a service searches a release with."""

    entry: DenseRelease
    index_type: IndexType
    searcher: DenseSearcher


def _dense_entry(release: Release, model: ModelRef | None) -> tuple[DenseRelease, str]:
    """(the release's dense entry, the question encoder's path): `model`'s passage side, else the
    release's default model."""
    if model is None:
        entry = release.dense_of(release.default_model) if release.default_model else release.dense[0]
        return entry, entry.model_path  # type: ignore[union-attr]
    entry = release.dense_of(model.passage_name) or release.dense_of(model.passage_key)
    if entry is None:
        served = ", ".join(e.model for e in release.dense)
        raise ValueError(f"release {release.release} has no index of model {model.passage_name!r} (the passage side "
                         f"of {model.name!r}); it serves {served}")  # fmt: skip
    return entry, model.path


def _check_model_folders(release: Release, entry: DenseRelease, paths: tuple[str, ...]) -> None:
    """Refuse, by name, a release whose model folder is gone (moved, deleted, or a removed checkout
    that held the base model). A model given by folder is recorded by its absolute path; a
    missing one reached huggingface_hub as a repo name and failed there with "Repo id must be in
    the form 'repo_name' ...", which names neither the release nor the cure."""
    for path in dict.fromkeys(paths):
        if Path(path).is_absolute() and not Path(path).exists():
            raise FileNotFoundError(f"release {release.release}: model {entry.model!r} was indexed from {path}, which "
                                    "no longer exists (moved or deleted?); put the model back there, or rebuild "
                                    "its index from where it is now (odqa index build --model ...)")  # fmt: skip


def open_release_dense(ws: Workspace, release: Release, model: ModelRef | None, index_type: IndexType | None,
                       encoders: EncoderCache) -> ReleaseDense | None:  # fmt: skip
    """The release's dense searcher (see the module doc); None when the release has no dense index."""
    from ...pipelines.dense.faiss_index import open_faiss_index
    from ...pipelines.search.dense_searcher import DenseSearcher

    if not release.dense:
        return None
    entry, question_path = _dense_entry(release, model)
    chosen = index_type or next(t for t in INDEX_TYPES if t in entry.indexes)
    if chosen not in entry.indexes:
        raise ValueError(f"release {release.release} has no {chosen} index of model {entry.model!r} "
                         f"(it has {', '.join(entry.indexes)})")  # fmt: skip
    _check_model_folders(release, entry, (question_path, entry.model_path))
    encoder = encoders.get(question_path)
    # Budget-split indexes (parts) are searched memory-mapped; whole ones are read into memory.
    index = open_faiss_index(ws.indexes_dir / entry.indexes[chosen], mmap=None)
    passage_side = encoder if question_path == entry.model_path else encoders.get(entry.model_path)
    if index.meta.model_fingerprint != passage_side.fingerprint:
        raise ValueError(f"release {release.release}: the {chosen} index of {entry.model!r} was built from other "
                         "weights than the model now at its path (retrained under the same id?)")  # fmt: skip
    return ReleaseDense(entry, chosen, DenseSearcher(encoder.model, index))


def open_release_bm25(ws: Workspace, release: Release) -> Bm25Searcher | None:
    """The release's BM25 searcher (a few threads: requests share it), or None when it has none."""
    from ...pipelines.retrieval.bm25 import open_bm25_index
    from ...pipelines.search.bm25_searcher import Bm25Searcher

    if not release.bm25:
        return None
    return Bm25Searcher(open_bm25_index(ws.indexes_dir / release.bm25, release.passages_version),
                        threads=min(4, os.cpu_count() or 1))  # fmt: skip
