"""Whether an index can answer for the current passages and model, decided from fingerprints.

An index records the fingerprints it was built from: the passages version (BM25 and FAISS) and
the passage encoder's weights and config (FAISS). A caller compares them with the current ones;
these functions say what is wrong in words a user can act on, or None when the index is fresh.
"""

from __future__ import annotations

from pipelines.dense.faiss_index import IndexMetadata


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


def bm25_index_problem(built_snapshot: str | None, *, passages_version: str) -> str | None:
    """Why a BM25 index cannot answer for these passages, or None."""
    if built_snapshot is None:
        return "no BM25 index of the passages"
    if built_snapshot != passages_version:
        return "the BM25 index is stale (passages changed)"
    return None
