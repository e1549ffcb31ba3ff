"""Searching a workspace from Python: BM25, dense or hybrid, answered as passages with their text.

A `Searcher` is opened by `odqa.Workspace.searcher` through the one opener the verbs and the
search service use (`models.searchers.open_searcher`), so its answers are the ones `odqa search`
and `odqa retrieve` give. It refuses a missing or stale index instead of building one: building
is a pipeline stage (`odqa bm25 index`, `odqa index build`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..pipelines.search.limits import checked_k
from ..pipelines.search.searcher import Searcher as PipelineSearcher
from ..storage.choices import RetrieverKind
from ..storage.passages import passages_by_id_at
from ..storage.workspace import Workspace as StorageWorkspace


@dataclass(frozen=True)
class Hit:
    """One retrieved passage: its id, score and rank (1 = best), and its title and text."""

    passage_id: str
    score: float
    rank: int
    title: str | None
    text: str | None


class Searcher:
    """Top passages of questions over one workspace; close it (or use `with`) to free the index."""

    def __init__(self, ws: StorageWorkspace, searcher: PipelineSearcher) -> None:
        self._ws = ws
        self._searcher = searcher

    @property
    def kind(self) -> RetrieverKind:
        """bm25, dense or hybrid."""
        return self._searcher.kind

    @property
    def passages_version(self) -> str:
        """The passages table version its index was built from (hit texts are that version's)."""
        return self._searcher.passages_version

    def describe(self) -> dict[str, Any]:
        """What identifies this searcher's answers (model, index, parameters), as runs record it."""
        return self._searcher.describe()

    def search(self, questions: Sequence[str], k: int = 10, *, with_text: bool = True) -> list[list[Hit]]:
        """Per question, its top `k` passages, best first. `with_text=False` leaves title and text
        out (None), which saves reading the passages table."""
        if isinstance(questions, str):
            raise TypeError("search takes a list of questions; wrap one question in a list: search([question])")
        checked_k(k)
        texts = [str(q) for q in questions]
        if not texts:
            return []
        ranked = self._searcher.search(texts, k).ranked()
        ids = sorted({pid for row in ranked for pid, _ in row})
        found = passages_by_id_at(self._ws, ids, self._searcher.passages_version) if with_text else {}
        return [[Hit(pid, score, rank, *found.get(pid, (None, None))) for rank, (pid, score) in enumerate(row, 1)]
                for row in ranked]  # fmt: skip

    def close(self) -> None:
        self._searcher.close()

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
