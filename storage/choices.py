"""The choice lists every layer shares, each declared once as a `Literal` type.

The CLI's `click.Choice` options, the flows' parameters (so the UI's dropdowns), the service's
request checks and the index layout all take their choices from here. Nothing is imported: the
CLI reads these before it loads anything heavy.
"""

from __future__ import annotations

from typing import Literal, get_args

IndexType = Literal["flat", "hnsw", "ivfpq"]  # a FAISS index: exact inner product, graph, compressed
INDEX_TYPES: tuple[IndexType, ...] = get_args(IndexType)

RetrieverKind = Literal["bm25", "dense", "hybrid"]  # what a searcher answers with
RETRIEVER_KINDS: tuple[RetrieverKind, ...] = get_args(RetrieverKind)

PositivesRetriever = Literal["bm25", "dense"]  # what ranks the passages positives are derived from
