"""A model's dense searcher over its FAISS index for the workspace's current passages.

An index answers only for the passages and the passage encoder it was built from: it is opened
after its fingerprints were compared with the current passages version and the passage encoder's
weights (`dense_index_problem`, `open_dense_index`), so no search answers from an index of other
passages or another model. A query-side fine-tune (`ModelRef.shares_passage_side` false) encodes
questions with its own weights and searches its passage model's index.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...storage.choices import IndexType
from ...storage.index_layout import DenseBuild, IndexLayout
from ...storage.model_registry import ModelRef
from ...storage.passages import require_passages
from ...storage.workspace import Workspace
from .encoders import EncoderCache, LoadedModel, thread_encoders

if TYPE_CHECKING:  # torch and FAISS are imported where a dense search needs them: a BM25 one never does
    from ...pipelines.dense.faiss_index import DenseIndex
    from ...pipelines.search.dense_searcher import DenseSearcher

_shared: dict[str, tuple[str | None, Any]] = {}  # per process: index folder -> (its metadata, the index)
_shared_lock = threading.Lock()


def dense_build(ws: Workspace, ref: ModelRef, passages_version: str | None = None) -> DenseBuild:
    """The passage-side model's builds (embeddings, indexes) for these passages (default: the
    current ones; a re-index names the version it builds, whatever imports commit meanwhile)."""
    return IndexLayout.of(ws).dense(ref.passage_key, passages_version or require_passages(ws))


def passage_fingerprint(ref: ModelRef, encoders: EncoderCache, question_model: LoadedModel | None = None
                        ) -> str:  # fmt: skip
    """The fingerprint the model's index must carry: its passage encoder's (the question model's
    own unless it is a query-side fine-tune, whose passage side is another model)."""
    if ref.shares_passage_side:
        return (question_model or encoders.get(ref.path)).fingerprint
    return encoders.get(ref.passage_path).fingerprint


def dense_index_problem(ws: Workspace, ref: ModelRef, index_type: IndexType, encoders: EncoderCache | None = None
                        ) -> str | None:  # fmt: skip
    """Why the model's `index_type` index cannot answer now (missing; stale because the passages or
    the passage encoder changed), or None."""
    from ...pipelines.dense.faiss_index import read_index_metadata
    from ...pipelines.search.freshness import dense_index_problem as index_problem_of

    build = dense_build(ws, ref)
    meta = read_index_metadata(build.index(index_type))
    if meta is None:
        earlier = IndexLayout.of(ws).other_builds(ref.passage_key, build.passages_version)
        if any(index_type in other.built_types() for other in earlier):
            return f"the {index_type} index of model {ref.passage_name} is stale (passages changed)"
        return f"no {index_type} index for model {ref.passage_name}"
    return index_problem_of(meta, passages_version=build.passages_version,
                            model_fingerprint=passage_fingerprint(ref, encoders or thread_encoders()),
                            model=ref.passage_name, index_type=index_type)  # fmt: skip


def require_dense_index(ws: Workspace, ref: ModelRef, index_type: IndexType) -> Path:
    """The folder of the model's `index_type` index for the current passages, or FileNotFoundError
    naming the command that builds it (checked before any model is loaded: that takes seconds)."""
    from ...pipelines.dense.faiss_index import read_index_metadata

    folder = dense_build(ws, ref).index(index_type)
    if read_index_metadata(folder) is None:
        raise FileNotFoundError(f"no {index_type} index for model {ref.passage_name!r}; build it with: "
                                f"odqa index build --model {ref.passage_name} --type {index_type}")  # fmt: skip
    return folder


def open_dense_index(ws: Workspace, ref: ModelRef, index_type: IndexType, encoders: EncoderCache | None = None,
                     question_model: LoadedModel | None = None) -> DenseIndex:  # fmt: skip
    """The model's index for the current passages, refused (FileNotFoundError / StaleIndexError)
    when missing or built for other passages or weights."""
    from ...pipelines.dense.faiss_index import open_faiss_index

    folder = require_dense_index(ws, ref, index_type)
    expected = passage_fingerprint(ref, encoders or thread_encoders(), question_model)
    # Budget-split indexes (parts) are searched memory-mapped; whole ones are read into memory.
    return open_faiss_index(folder, expected, dense_build(ws, ref).passages_version, mmap=None)


class _OneSearchAtATime:
    """An index on GPUs, which FAISS does not let two threads search at once."""

    def __init__(self, index: DenseIndex) -> None:
        self.index, self.lock, self.meta = index, threading.Lock(), index.meta

    def search_run(self, queries: Any, k: int, question_ids: Any) -> Any:
        with self.lock:
            return self.index.search_run(queries, k, question_ids)


def shared_dense_index(ws: Workspace, ref: ModelRef, index_type: IndexType, encoders: EncoderCache,
                       question_model: LoadedModel) -> DenseIndex:  # fmt: skip
    """The model's index, opened (and checked, see `open_dense_index`) once per process and index
    build, for the tasks a worker runs in threads: CPU indexes are searched by several threads at
    once, GPU ones in turn."""
    from ...pipelines.dense.faiss_index import gpu_count, read_index_metadata

    folder = dense_build(ws, ref).index(index_type)
    meta = read_index_metadata(folder)
    identity = meta.to_json() if meta is not None else None
    with _shared_lock:
        cached = _shared.get(str(folder))
        if cached is None or cached[0] != identity:
            index = open_dense_index(ws, ref, index_type, encoders, question_model)
            _shared[str(folder)] = (identity, _OneSearchAtATime(index) if gpu_count() else index)
        return _shared[str(folder)][1]


def open_dense_searcher(ws: Workspace, ref: ModelRef, index_type: IndexType, encoders: EncoderCache | None = None,
                        *, shared_index: bool = False) -> tuple[DenseSearcher, LoadedModel]:  # fmt: skip
    """The model's question encoder over its index (both checked, see `open_dense_index`), with the
    loaded question model (its fingerprint identifies the searcher's answers). `shared_index`: the
    index this process holds for the model (`shared_dense_index`), not one of the searcher's own."""
    from ...pipelines.search.dense_searcher import DenseSearcher

    cache = encoders or thread_encoders()
    require_dense_index(ws, ref, index_type)
    question_model = cache.get(ref.path)
    opened = shared_dense_index if shared_index else open_dense_index
    index = opened(ws, ref, index_type, cache, question_model)
    return DenseSearcher(question_model.model, index), question_model
