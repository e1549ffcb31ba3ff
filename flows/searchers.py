"""The searcher a verb asked for, over the workspace: `--retriever bm25|dense|hybrid` and its options.

Retrieve, search, tune-hybrid and mine all open their searcher here. A dense or hybrid searcher
needs the model's index for the current passages: a missing or stale one is built first
(`flows.index.ensure_dense_index`), and the model is resolved and loaded once per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..models.workspace_search import bm25_searcher, loaded_model, open_dense_index, tuned_alpha
from ..pipelines.dense.hybrid import DEFAULT_DEPTH
from ..pipelines.retrieval.bm25 import DEFAULT_B, DEFAULT_K1
from ..pipelines.retrieval.java import ensure_java
from ..pipelines.search.dense_searcher import DenseSearcher
from ..pipelines.search.hybrid_searcher import HybridSearcher
from ..pipelines.search.searcher import Searcher
from ..storage import Workspace
from ..storage.model_registry import ModelRef, resolve_model
from .index import ensure_dense_index

RetrieverKind = Literal["bm25", "dense", "hybrid"]
RETRIEVER_KINDS: tuple[RetrieverKind, ...] = ("bm25", "dense", "hybrid")


@dataclass(frozen=True)
class RetrieverChoice:
    """Which retriever a verb searches with, and its options."""

    kind: RetrieverKind = "bm25"
    model: str | None = None  # dense and hybrid: a model id, folder or Hugging Face name
    index_type: str = "flat"
    alpha: float | None = None  # hybrid: weight of BM25; None takes the model's tuned alpha
    depth: int = DEFAULT_DEPTH  # hybrid: candidates taken from each side (TASER's K')
    k1: float = DEFAULT_K1
    b: float = DEFAULT_B
    threads: int | None = None  # BM25 search threads (default: all cores)

    def __post_init__(self) -> None:
        if self.kind not in RETRIEVER_KINDS:
            raise ValueError(f"unknown retriever {self.kind!r}; available: {', '.join(RETRIEVER_KINDS)}")
        if self.kind != "bm25" and not self.model:
            raise ValueError(f"the {self.kind} retriever needs --model (a model id, Hugging Face name or folder)")


@dataclass
class OpenSearcher:
    """A searcher with what identifies its answers (recorded with a run, keyed for no-ops)."""

    searcher: Searcher
    config: dict[str, Any]
    ref: ModelRef | None = None


def dense_searcher(ws: Workspace, ref: ModelRef, index_type: str) -> OpenSearcher:
    """The model's dense searcher, its index built first when missing or stale."""
    question_model = loaded_model(ref.path)
    ensure_dense_index(ws, ref, index_type, question_model)
    searcher = DenseSearcher(question_model.model, open_dense_index(ws, ref, index_type, question_model))
    config = {"model": ref.name, "model_path": ref.path, "question_model_fingerprint": question_model.fingerprint,
              **searcher.describe()}  # fmt: skip
    return OpenSearcher(searcher, config, ref)


def open_searcher(ws: Workspace, choice: RetrieverChoice) -> OpenSearcher:
    """The searcher `choice` names over the workspace's current indexes."""
    if choice.kind == "bm25":
        ensure_java()
        searcher = bm25_searcher(ws, k1=choice.k1, b=choice.b, threads=choice.threads)
        return OpenSearcher(searcher, searcher.describe())
    ref = resolve_model(ws, choice.model)  # type: ignore[arg-type]
    dense = dense_searcher(ws, ref, choice.index_type)
    if choice.kind == "dense":
        return dense
    alpha = choice.alpha if choice.alpha is not None else tuned_alpha(ws, ref)
    ensure_java()
    sparse = bm25_searcher(ws, k1=choice.k1, b=choice.b, threads=choice.threads)
    hybrid = HybridSearcher(dense.searcher, sparse, alpha, choice.depth)
    return OpenSearcher(hybrid, {**dense.config, "alpha": alpha, "depth": choice.depth, "bm25": sparse.describe()},
                        ref)  # fmt: skip
