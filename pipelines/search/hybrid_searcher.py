"""Hybrid search as in TASER: fuse the top candidates of a dense and a BM25 searcher.

TASER takes K' = 100 candidates from each side and scores their union with
``dense + alpha * bm25`` after normalising each list (`pipelines.dense.hybrid`); asking for more
than K' passages widens K' to k.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ..dense.hybrid import DEFAULT_DEPTH, fuse, fusion_candidates
from .hits import Hits
from .limits import checked_k
from .searcher import Searcher


def fused_hits(dense: Hits, sparse: Hits, alpha: float, k: int, depth: int = DEFAULT_DEPTH) -> Hits:
    """The top `k` of the fused candidates of two searchers' hits for the same questions."""
    return Hits.from_run(fuse(fusion_candidates(dense.table, sparse.table, max(depth, k)), alpha, k), dense.count)


class HybridSearcher:
    """A :class:`~pipelines.search.searcher.Searcher` fusing a dense and a BM25 searcher."""

    kind = "hybrid"

    def __init__(self, dense: Searcher, sparse: Searcher, alpha: float, depth: int = DEFAULT_DEPTH) -> None:
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if dense.passages_version != sparse.passages_version:  # fused ids would name two corpora's passages
            raise ValueError(f"the dense index is of passages {dense.passages_version} and the BM25 index of "
                             f"passages {sparse.passages_version}: a hybrid fuses indexes of the same passages")  # fmt: skip
        self.dense, self.sparse, self.alpha, self.depth = dense, sparse, float(alpha), depth

    @property
    def passages_version(self) -> str:
        return self.dense.passages_version

    def candidates(self, questions: Sequence[str], k: int = 0) -> pa.Table:
        """The fused-ready candidates (`fusion_candidates`) of the questions, keyed by position:
        what tuning alpha scores without searching again."""
        depth = max(self.depth, k)
        return fusion_candidates(self.dense.search(questions, depth).table, self.sparse.search(questions, depth).table,
                                 depth)  # fmt: skip

    def search(self, questions: Sequence[str], k: int) -> Hits:
        checked_k(k)  # each side keeps its own candidates within its corpus
        return Hits.from_run(fuse(self.candidates(questions, k), self.alpha, k), len(questions))

    def describe(self) -> dict[str, Any]:
        return {**self.dense.describe(), "alpha": self.alpha, "depth": self.depth, "bm25": self.sparse.describe()}

    def close(self) -> None:
        self.dense.close()
        self.sparse.close()
