"""The BM25 searcher of a workspace's current passages (Anserini's Lucene index, `pipelines.retrieval.bm25`)."""

from __future__ import annotations

from ...pipelines.retrieval.bm25 import DEFAULT_B, DEFAULT_K1, IndexMissingError, open_bm25_index
from ...pipelines.retrieval.java import ensure_java
from ...pipelines.search.bm25_searcher import Bm25Searcher
from ...storage.index_layout import IndexLayout
from ...storage.passages import require_passages
from ...storage.workspace import Workspace


def open_bm25_searcher(ws: Workspace, *, k1: float = DEFAULT_K1, b: float = DEFAULT_B, threads: int | None = None,
                       passages_version: str | None = None) -> Bm25Searcher:  # fmt: skip
    """Search the BM25 index of the current passages (or of `passages_version`: a hybrid's BM25
    side searches the passages its dense side was opened for, whatever committed between).
    Java is checked first (its error says how to get one); a missing index is an error saying
    how to build it."""
    ensure_java()
    version = passages_version or require_passages(ws)
    path = IndexLayout.of(ws).bm25(version)
    try:
        info = open_bm25_index(path, version)
    except IndexMissingError:
        which = f"passages {version}" if passages_version else f"the current passages ({version})"
        raise IndexMissingError(f"no BM25 index of {which} in {ws.indexes_dir}: "
                                "build it with `odqa bm25 index`") from None  # fmt: skip
    return Bm25Searcher(info, k1=k1, b=b, threads=threads)
