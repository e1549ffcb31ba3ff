"""Dense search: encode the questions with a model's question tower, search its FAISS index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..dense.faiss_index import DenseIndex
from ..dense.retriever_protocol import DenseRetriever
from .hits import Hits, positions
from .limits import checked_k


class DenseSearcher:
    """A :class:`~pipelines.search.searcher.Searcher` over one FAISS index.

    The encoder must be the index's passage-side model or a query-side fine-tune of it (the
    caller checks fingerprints, see `pipelines.search.freshness`). Safe to call from several
    threads at once: the encoder tokenizes under a lock and runs its forward pass without
    touching shared state, and FAISS releases the GIL."""

    kind = "dense"

    def __init__(self, encoder: DenseRetriever, index: DenseIndex, *, batch_size: int = 64) -> None:
        self.encoder = encoder
        self.index = index
        self.batch_size = batch_size

    def search(self, questions: Sequence[str], k: int) -> Hits:
        checked_k(k)
        vectors = self.encoder.encode_questions(list(questions), batch_size=self.batch_size, show_progress=False)
        return Hits.from_run(self.index.search_run(vectors, k, positions(len(questions))), len(questions))

    @property
    def passages_version(self) -> str:
        return self.index.meta.corpus_fingerprint

    def describe(self) -> dict[str, Any]:
        meta = self.index.meta
        return {"index_type": meta.index_type, "index_model_fingerprint": meta.model_fingerprint,
                "index_corpus": meta.corpus_fingerprint, "index_params": meta.params}  # fmt: skip

    def close(self) -> None:
        """Nothing to release: the index and encoder are freed with the searcher."""
