"""`--retriever bm25|dense|hybrid` and its options, opened into a searcher over the workspace.

`open_searcher` resolves `--model` once (`storage.model_registry.resolve_model`) and passes the
resolved `ModelRef` down; the dense side opens first when an index may have to be built for it,
and the hybrid composes it with the BM25 searcher (TASER's fusion, `pipelines.search.hybrid_searcher`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...pipelines.dense.hybrid import DEFAULT_DEPTH
from ...pipelines.retrieval.bm25 import DEFAULT_B, DEFAULT_K1
from ...pipelines.search.hybrid_searcher import HybridSearcher
from ...pipelines.search.searcher import Searcher
from ...storage.choices import RETRIEVER_KINDS, IndexType, RetrieverKind
from ...storage.index_layout import IndexLayout
from ...storage.model_registry import ModelRef, resolve_model
from ...storage.workspace import Workspace
from .bm25 import open_bm25_searcher
from .dense import open_dense_searcher
from .encoders import EncoderCache, thread_encoders

# Builds the model's index when it is missing or stale (the flows pass `flows.stages.index.ensure_dense_index`).
IndexBuilder = Callable[[Workspace, ModelRef, IndexType, EncoderCache], None]


@dataclass(frozen=True)
class RetrieverChoice:
    """Which retriever a verb searches with, and its options."""

    kind: RetrieverKind = "bm25"
    model: str | None = None  # dense and hybrid: a model id, folder or Hugging Face name
    index_type: IndexType = "flat"
    alpha: float | None = None  # hybrid: weight of BM25; None takes the model's tuned alpha
    depth: int = DEFAULT_DEPTH  # hybrid: candidates taken from each side (TASER's K')
    k1: float = DEFAULT_K1
    b: float = DEFAULT_B
    threads: int | None = None  # BM25 search threads (default: all cores)

    def __post_init__(self) -> None:
        if self.kind not in RETRIEVER_KINDS:
            raise ValueError(f"unknown retriever {self.kind!r}; available: {', '.join(RETRIEVER_KINDS)}")
        if self.kind != "bm25" and not self.model:
            raise ValueError(f"the {self.kind} retriever needs a model (--model: a model id, Hugging Face name or "
                             "folder)")  # fmt: skip


@dataclass
class OpenSearcher:
    """A searcher with what identifies its answers (recorded with a run, keyed for no-ops), and
    the resolved model of a dense or hybrid one."""

    searcher: Searcher
    config: dict[str, Any]
    ref: ModelRef | None = None


def tuned_alpha(ws: Workspace, ref: ModelRef) -> float:
    """The hybrid weight of BM25 that `odqa tune-hybrid` stored for the model; an error saying
    how to get one when none is stored."""
    alpha = IndexLayout.of(ws).tuned_alpha(ref.key)
    if alpha is None:
        raise ValueError(f"no tuned alpha for model {ref.name!r}: pass --alpha or run "
                         f"odqa tune-hybrid --model {ref.name} first")  # fmt: skip
    return alpha


def open_searcher(ws: Workspace, choice: RetrieverChoice, *, ensure_index: IndexBuilder | None = None,
                  encoders: EncoderCache | None = None) -> OpenSearcher:  # fmt: skip
    """The searcher `choice` names over the workspace's current indexes. A missing or stale dense
    index is built by `ensure_index` when one is given, else refused with the command that builds it."""
    if choice.kind == "bm25":
        searcher = open_bm25_searcher(ws, k1=choice.k1, b=choice.b, threads=choice.threads)
        return OpenSearcher(searcher, searcher.describe())
    ref = resolve_model(ws, choice.model)  # type: ignore[arg-type]
    alpha = None
    if choice.kind == "hybrid":  # before any model is loaded or index built: a missing alpha is a quick error
        alpha = choice.alpha if choice.alpha is not None else tuned_alpha(ws, ref)
    cache = encoders or thread_encoders()
    if ensure_index is not None:
        ensure_index(ws, ref, choice.index_type, cache)
    dense, question_model = open_dense_searcher(ws, ref, choice.index_type, cache)
    config = {"model": ref.name, "model_path": ref.path, "question_model_fingerprint": question_model.fingerprint,
              **dense.describe()}  # fmt: skip
    if choice.kind == "dense":
        return OpenSearcher(dense, config, ref)
    sparse = open_bm25_searcher(ws, k1=choice.k1, b=choice.b, threads=choice.threads,
                                passages_version=dense.passages_version)  # fmt: skip
    hybrid = HybridSearcher(dense, sparse, alpha, choice.depth)  # type: ignore[arg-type]
    config = {**config, "alpha": alpha, "depth": choice.depth, "bm25": sparse.describe()}
    return OpenSearcher(hybrid, config, ref)
