"""`odqa search`: the top passages of free-text questions, with their titles and texts."""

from __future__ import annotations

from dataclasses import dataclass

from prefect import flow

from flows.searchers import RetrieverChoice, open_searcher
from storage import Workspace
from storage.passages import passages_by_id


@dataclass(frozen=True)
class SearchHit:
    question: str
    rank: int
    score: float
    passage_id: str
    title: str | None
    text: str | None


@flow(name="search")
def search_flow(
    questions: list[str],
    retriever: str = "bm25",
    model: str | None = None,
    k: int = 10,
    alpha: float | None = None,
    index_type: str = "flat",
    workspace: str | None = None,
) -> list[SearchHit]:
    """Top-k passages (rank, score, passage_id, title, text) for each free-text question."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    ws = Workspace.resolve(workspace)
    choice = RetrieverChoice(kind=retriever, model=model, index_type=index_type, alpha=alpha, depth=max(100, k))  # type: ignore[arg-type]
    opened = open_searcher(ws, choice)
    try:
        ranked = opened.searcher.search(list(questions), k).ranked()
    finally:
        opened.searcher.close()
    texts = passages_by_id(ws, sorted({pid for found in ranked for pid, _ in found}))
    return [SearchHit(question, rank, score, pid, *texts.get(pid, (None, None)))
            for question, found in zip(questions, ranked, strict=True)
            for rank, (pid, score) in enumerate(found, start=1)]  # fmt: skip
