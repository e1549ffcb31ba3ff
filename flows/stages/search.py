"""`odqa search`: the top passages of free-text questions, with their titles and texts.

A search writes nothing, so it runs no Prefect flow: `SearchSession` opens the searcher once (the
JVM for BM25, the model and its FAISS index for dense) and answers question after question with
it. It builds nothing either: a missing index is an error naming the command that builds it.
Prefect, torch and FAISS are imported only for the retrievers that need them, so a BM25 search
starts in about the time a plain pyserini script does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...pipelines.search.limits import checked_k
from ...storage import Workspace
from ...storage.choices import IndexType, RetrieverKind
from ...storage.passages import passages_by_id_at


@dataclass(frozen=True)
class SearchHit:
    question: str
    rank: int
    score: float
    passage_id: str
    title: str | None
    text: str | None


class SearchSession:
    """One searcher over the workspace's current indexes, opened once (`models.searchers`) and
    asked many times."""

    def __init__(self, workspace: str | None, retriever: RetrieverKind = "bm25", model: str | None = None,
                 alpha: float | None = None, index_type: IndexType = "flat") -> None:  # fmt: skip
        from ...models.searchers import RetrieverChoice, open_searcher

        choice = RetrieverChoice(kind=retriever, model=model, index_type=index_type, alpha=alpha)
        self.ws = Workspace.open_existing(workspace)
        opened = open_searcher(self.ws, choice)
        self.searcher = opened.searcher
        self.alpha: float | None = opened.config.get("alpha")  # hybrid: the weight of BM25 in use

    def ask(self, questions: list[str], k: int) -> list[SearchHit]:
        """Top-k passages (rank, score, passage_id, title, text) for each free-text question."""
        checked_k(k)
        ranked = self.searcher.search(list(questions), k).ranked()
        texts = passages_by_id_at(self.ws, sorted({pid for found in ranked for pid, _ in found}),
                                  self.searcher.passages_version)  # fmt: skip
        return [SearchHit(question, rank, score, pid, *texts.get(pid, (None, None)))
                for question, found in zip(questions, ranked, strict=True)
                for rank, (pid, score) in enumerate(found, start=1)]  # fmt: skip

    def close(self) -> None:
        self.searcher.close()

    def __enter__(self) -> SearchSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
