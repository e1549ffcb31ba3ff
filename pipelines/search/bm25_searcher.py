"""BM25 search over a Lucene index built by `pipelines.retrieval.bm25`.

Search uses Anserini's ``SimpleSearcher`` (the class behind pyserini's ``LuceneSearcher``) with
``set_bm25(k1, b)`` and ``batch_search(queries, qids, k, threads)``, exactly what
``LuceneSearcher.batch_search`` calls, reached through ``pyserini.pyclass`` (see
`pipelines.retrieval.bm25` for why not ``pyserini.search.lucene``). A question with no matching
passage (only stop words, say) simply has no hits.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from ..retrieval.bm25 import DEFAULT_B, DEFAULT_K1, IndexInfo
from ..retrieval.java import JavaInfo, ensure_java, start_quiet_jvm
from .hits import Hits
from .limits import within_corpus


class SearcherClosedError(RuntimeError):
    """A search on a searcher already closed (a retired release's, say)."""


class Bm25Searcher:
    """A :class:`~pipelines.search.searcher.Searcher` over one BM25 index."""

    kind = "bm25"

    def __init__(self, index: IndexInfo, *, k1: float = DEFAULT_K1, b: float = DEFAULT_B,
                 threads: int | None = None) -> None:  # fmt: skip
        self.java: JavaInfo = ensure_java()
        start_quiet_jvm(self.java)
        from pyserini.pyclass import JArrayList, autoclass

        self._array_list = JArrayList
        self.index = index
        self.k1, self.b = float(k1), float(b)
        self.threads = threads or os.cpu_count() or 1
        self._searcher = autoclass("io.anserini.search.SimpleSearcher")(str(index.path))
        self._searcher.set_bm25(self.k1, self.b)
        self.documents = int(self._searcher.get_total_num_docs())
        self._lock = threading.Lock()  # one JVM searcher: batches take turns

    def search(self, questions: Sequence[str], k: int) -> Hits:
        qids = [str(i) for i in range(len(questions))]
        java_queries, java_qids = self._array_list(), self._array_list()
        for query, qid in zip(questions, qids, strict=True):
            java_queries.add(query)
            java_qids.add(qid)
        with self._lock:
            if self._searcher is None:
                raise SearcherClosedError(f"the BM25 searcher of {self.index.path} is closed")
            results = self._searcher.batch_search(java_queries, java_qids, within_corpus(k, self.documents),
                                                  int(self.threads))  # fmt: skip
            found = {entry.getKey(): [(hit.docid, float(hit.score)) for hit in entry.getValue()]
                     for entry in results.entrySet().toArray()}  # fmt: skip
        return Hits.from_ranked([found.get(qid, []) for qid in qids])

    @property
    def passages_version(self) -> str:
        return self.index.snapshot

    def describe(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "index_snapshot": self.index.snapshot}

    def close(self) -> None:
        """Close the Lucene reader once the batch searching now (if any) is done: closing it under a
        running search would fail that search inside the JVM. Later searches raise
        `SearcherClosedError`; closing again does nothing."""
        with self._lock:
            searcher, self._searcher = self._searcher, None
        if searcher is not None:
            searcher.close()
