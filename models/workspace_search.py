"""Searchers over a workspace's indexes, with their models loaded: the glue that the flows and the
search service share (no Prefect here, so the service can use it without starting a server).

`--model` is resolved once (`storage.model_registry.resolve_model`), the model is loaded once
per thread and save (`loaded_model`), and an index is opened only after its fingerprints were
compared with the current passages and the passage encoder's weights (`dense_index_problem`),
so no search ever answers from an index of other passages or another model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from ..pipelines.retrieval.bm25 import DEFAULT_B, DEFAULT_K1, IndexMissingError, open_bm25_index
from ..pipelines.search.bm25_searcher import Bm25Searcher
from ..pipelines.search.searcher import Searcher, search_run
from ..storage.index_layout import DenseBuild, IndexLayout
from ..storage.model_registry import ModelRef
from ..storage.passages import passage_texts, require_passages
from ..storage.workspace import Workspace

if TYPE_CHECKING:  # torch and FAISS are imported where a dense search needs them: a BM25 one never does
    from ..pipelines.dense.faiss_index import DenseIndex
    from ..pipelines.dense.mining import MiningResult
    from ..pipelines.evaluation.answers import MatchMode
    from ..pipelines.search.dense_searcher import DenseSearcher
    from .base import Retriever

_local = threading.local()  # per thread: path -> (files stamp, LoadedModel), most recent last
MODELS_PER_THREAD = 3  # a pipeline run goes through many models: keep the last few, not all


def _files_stamp(path: str) -> tuple:
    """What changes when the model at `path` is saved again (saves replace the folder's files)."""
    folder = Path(path)
    if not folder.is_dir():
        return (path,)
    return tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns, f.stat().st_ino) for f in sorted(folder.iterdir())
                 if f.is_file())  # fmt: skip


@dataclass(frozen=True)
class LoadedModel:
    model: Retriever
    fingerprint: str  # config_fingerprint(): what stored embeddings and indexes record


def loaded_model(path: str) -> LoadedModel:
    """The model at `path` with its fingerprint, loaded once per thread, and again when the model
    was saved anew (workers and services outlive training runs). One per thread because a model
    being trained or moved between devices must not be shared with another thread's work."""
    from .retriever import load_retriever

    cache: dict[str, tuple[tuple, LoadedModel]] = _local.__dict__.setdefault("models", {})
    stamp = _files_stamp(path)
    entry = cache.pop(path, None)
    if entry is None or entry[0] != stamp:
        model = load_retriever(path)
        entry = (stamp, LoadedModel(model, model.config_fingerprint()))
    cache[path] = entry
    while len(cache) > MODELS_PER_THREAD:
        cache.pop(next(iter(cache)))
    return entry[1]


def dense_build(ws: Workspace, ref: ModelRef) -> DenseBuild:
    """The passage-side model's builds (embeddings, indexes) for the current passages."""
    return IndexLayout.of(ws).dense(ref.passage_key, require_passages(ws))


def index_model_fingerprint(ref: ModelRef, question_model: LoadedModel | None = None) -> str:
    """The fingerprint the model's index must carry: its passage encoder's (the question model's
    own unless it is a query-side fine-tune, whose passage side is another model)."""
    if question_model is not None and ref.shares_passage_side:
        return question_model.fingerprint
    return loaded_model(ref.passage_path).fingerprint


def dense_index_problem(ws: Workspace, ref: ModelRef, index_type: str,
                        question_model: LoadedModel | None = None) -> str | None:  # fmt: skip
    """Why the model's `index_type` index cannot answer now (missing; stale because the passages or
    the passage encoder changed), or None."""
    from ..pipelines.dense.faiss_index import read_index_metadata
    from ..pipelines.search.freshness import dense_index_problem as index_problem_of

    build = dense_build(ws, ref)
    meta = read_index_metadata(build.index(index_type))
    if meta is None:
        earlier = IndexLayout.of(ws).other_builds(ref.passage_key, build.passages_version)
        if any(index_type in other.built_types() for other in earlier):
            return f"the {index_type} index of model {ref.passage_name} is stale (passages changed)"
        return f"no {index_type} index for model {ref.passage_name}"
    return index_problem_of(meta, passages_version=build.passages_version,
                            model_fingerprint=index_model_fingerprint(ref, question_model), model=ref.passage_name,
                            index_type=index_type)  # fmt: skip


def require_dense_index(ws: Workspace, ref: ModelRef, index_type: str) -> Path:
    """The folder of the model's `index_type` index for the current passages, or FileNotFoundError
    naming the command that builds it (checked before any model is loaded: that takes seconds)."""
    from ..pipelines.dense.faiss_index import read_index_metadata

    folder = dense_build(ws, ref).index(index_type)
    if read_index_metadata(folder) is None:
        raise FileNotFoundError(f"no {index_type} index for model {ref.passage_name!r}; build it with: "
                                f"odqa index build --model {ref.passage_name} --type {index_type}")  # fmt: skip
    return folder


def open_dense_index(ws: Workspace, ref: ModelRef, index_type: str, question_model: LoadedModel | None = None
                     ) -> DenseIndex:  # fmt: skip
    """The model's index for the current passages, refused (FileNotFoundError / StaleIndexError)
    when missing or built for other passages or weights."""
    from ..pipelines.dense.faiss_index import open_faiss_index

    build = dense_build(ws, ref)
    folder = require_dense_index(ws, ref, index_type)
    # Budget-split indexes (parts) are searched memory-mapped; whole ones are read into memory.
    return open_faiss_index(folder, index_model_fingerprint(ref, question_model), build.passages_version, mmap=None)


def dense_searcher(ws: Workspace, ref: ModelRef, index_type: str = "flat") -> DenseSearcher:
    """Search the model's index with its question encoder (both checked, see `open_dense_index`)."""
    from ..pipelines.search.dense_searcher import DenseSearcher

    require_dense_index(ws, ref, index_type)
    question_model = loaded_model(ref.path)
    return DenseSearcher(question_model.model, open_dense_index(ws, ref, index_type, question_model))


def tuned_alpha(ws: Workspace, ref: ModelRef) -> float:
    """The hybrid weight of BM25 that `odqa tune-hybrid` stored for the model; an error saying
    how to get one when none is stored."""
    alpha = IndexLayout.of(ws).tuned_alpha(ref.key)
    if alpha is None:
        raise ValueError(f"no tuned alpha for model {ref.name!r}: pass --alpha or run odqa tune-hybrid first")
    return alpha


def bm25_searcher(ws: Workspace, *, k1: float = DEFAULT_K1, b: float = DEFAULT_B, threads: int | None = None
                  ) -> Bm25Searcher:  # fmt: skip
    """Search the BM25 index of the current passages; a missing one is an error saying how to build it."""
    version = require_passages(ws)
    path = IndexLayout.of(ws).bm25(version)
    try:
        info = open_bm25_index(path, version)
    except IndexMissingError:
        raise IndexMissingError(f"no BM25 index of the current passages ({version}) in {ws.indexes_dir}: "
                                "build it with `odqa bm25 index`") from None  # fmt: skip
    return Bm25Searcher(info, k1=k1, b=b, threads=threads)


def mine_questions(ws: Workspace, searcher: Searcher, questions: pa.Table, depth: int, count: int,
                   mode: MatchMode) -> MiningResult:  # fmt: skip
    """Hard negatives of `questions` (question_id, question, answers, positive_ids): each one's top
    `depth` passages minus gold and answer-bearing ones, the best `count` kept."""
    from ..pipelines.dense.mining import mine_hard_negatives

    run = pa.concat_tables(list(search_run(searcher, questions, depth)))
    texts, missing = passage_texts(ws, run.column("passage_id").to_pylist(), with_title=False)
    if missing:
        raise RuntimeError(f"{missing} retrieved passages are not in the passages table; rebuild the index")
    return mine_hard_negatives(run, questions, texts, num_negatives=count, depth=depth, mode=mode)
