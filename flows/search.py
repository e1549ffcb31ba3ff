"""`odqa search`: the top passages of free-text questions, with their titles and texts.

A search writes nothing, so it runs no Prefect flow: `SearchSession` opens the searcher once (the
JVM for BM25, the model and its FAISS index for dense) and answers question after question with
it. It builds nothing either: a missing index is an error naming the command that builds it.
Prefect, torch and FAISS are imported only for the retrievers that need them, so a BM25 search
starts in about the time a plain pyserini script does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..storage import Workspace
from ..storage.passages import passages_by_id

if TYPE_CHECKING:
    from ..pipelines.search.searcher import Searcher

RETRIEVERS = ("bm25", "dense", "hybrid")
HYBRID_DEPTH = 100  # candidates taken from each side before fusion (TASER's K')


@dataclass(frozen=True)
class SearchHit:
    question: str
    rank: int
    score: float
    passage_id: str
    title: str | None
    text: str | None


class SearchSession:
    """One searcher over the workspace's current indexes, opened once and asked many times."""

    def __init__(self, workspace: str | None, retriever: str = "bm25", model: str | None = None,
                 alpha: float | None = None, index_type: str = "flat") -> None:  # fmt: skip
        if retriever not in RETRIEVERS:
            raise ValueError(f"unknown retriever {retriever!r}; available: {', '.join(RETRIEVERS)}")
        if retriever != "bm25" and not model:
            raise ValueError(f"the {retriever} retriever needs --model (a model id, Hugging Face name or folder)")
        self.ws = Workspace.resolve(workspace)
        self.alpha: float | None = None
        self.searcher = self._open(retriever, model, alpha, index_type)

    def _open(self, retriever: str, model: str | None, alpha: float | None, index_type: str) -> Searcher:
        from ..models.workspace_search import bm25_searcher

        if retriever == "bm25":
            return bm25_searcher(self.ws)
        from ..models.workspace_search import dense_searcher
        from ..storage.index_layout import IndexLayout
        from ..storage.model_registry import resolve_model

        ref = resolve_model(self.ws, model)  # type: ignore[arg-type]
        if retriever == "hybrid":
            self.alpha = alpha if alpha is not None else IndexLayout.of(self.ws).tuned_alpha(ref.key)
            if self.alpha is None:
                raise ValueError(f"no tuned alpha for model {ref.name!r}: pass --alpha or run "
                                 f"odqa tune-hybrid --model {ref.name} first")  # fmt: skip
        dense = dense_searcher(self.ws, ref, index_type)
        if retriever == "dense":
            return dense
        from ..pipelines.search.hybrid_searcher import HybridSearcher

        return HybridSearcher(dense, bm25_searcher(self.ws), self.alpha, HYBRID_DEPTH)  # type: ignore[arg-type]

    def ask(self, questions: list[str], k: int) -> list[SearchHit]:
        """Top-k passages (rank, score, passage_id, title, text) for each free-text question."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        ranked = self.searcher.search(list(questions), k).ranked()
        texts = passages_by_id(self.ws, sorted({pid for found in ranked for pid, _ in found}))
        return [SearchHit(question, rank, score, pid, *texts.get(pid, (None, None)))
                for question, found in zip(questions, ranked, strict=True)
                for rank, (pid, score) in enumerate(found, start=1)]  # fmt: skip

    def close(self) -> None:
        self.searcher.close()

    def __enter__(self) -> SearchSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
