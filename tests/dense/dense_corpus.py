"""Deterministic synthetic passage corpora with real words (the MiniLM vocabulary)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from dense_minilm import minilm_dir


def _words() -> list[str]:
    vocab = (minilm_dir() / "vocab.txt").read_text(encoding="utf-8").split("\n")
    return [w for w in vocab if w.isalpha() and w.isascii() and len(w) > 2]


def make_corpus(n: int, seed: int = 0, min_words: int = 5, max_words: int = 25) -> pa.Table:
    """``n`` passages (passage_id, title, text) of varied length, the same for the same seed."""
    rng = np.random.default_rng(seed)
    words = np.array(_words())
    lengths = rng.integers(min_words, max_words + 1, size=n)
    texts = [" ".join(rng.choice(words, size=k)) for k in lengths]
    titles = [" ".join(rng.choice(words, size=2)).title() for _ in range(n)]
    ids = [f"p{i:07d}" for i in range(n)]
    return pa.table({"passage_id": ids, "title": titles, "text": texts})


def as_batches(table: pa.Table, rows_per_batch: int) -> Iterator[pa.RecordBatch]:
    """The corpus as a stream of record batches, as a Parquet scan would deliver it."""
    yield from table.to_batches(max_chunksize=rows_per_batch)
