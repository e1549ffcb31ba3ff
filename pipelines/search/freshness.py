"""Whether a dense index can answer for the current passages and model, decided from fingerprints.

A FAISS index records the fingerprints it was built from: the passages version and the passage
encoder's weights and config. A caller compares them with the current ones; this says what is
wrong in words a user can act on, or None when the index is fresh. (BM25 indexes are kept per
passages version, `storage.index_layout`: the current one exists or is missing.)
"""

from __future__ import annotations

from ..dense.faiss_index import IndexMetadata


def dense_index_problem(meta: IndexMetadata | None, *, passages_version: str, model_fingerprint: str,
                        model: str, index_type: str) -> str | None:  # fmt: skip
    """Why a FAISS index cannot answer for these passages and this passage encoder, or None."""
    if meta is None:
        return f"no {index_type} index for model {model}"
    if meta.corpus_fingerprint != passages_version:
        return f"the {index_type} index of model {model} is stale (passages changed)"
    if meta.model_fingerprint != model_fingerprint:
        return f"the {index_type} index of model {model} is stale (model changed)"
    return None

