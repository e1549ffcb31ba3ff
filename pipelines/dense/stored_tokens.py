"""A shard's token ids from the `passage_tokens` table, tokenizing only the passages it lacks.

``TokenFeed`` is what the encoder asks for each shard's tokens: it hashes the passages (id,
title, text), takes the rows the store has for the model's tokenization, tokenizes the rest in
worker processes (``TokenizePool``) and commits them to the store before handing the shard on,
so the next model with the same tokenizer, the next round of training or the next re-index
tokenizes nothing it has seen. It counts both, for the stage's report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...storage.passage_tokens import Tokenization, TokenRows
from .passage_tokenizer import PassageTokenizer, TokenizePool


def passage_keys(ids: Sequence[str] | pa.Array, titles: Sequence[str | None] | pa.Array,
                 texts: Sequence[str] | pa.Array) -> np.ndarray:  # fmt: skip
    """(n, 2) uint64: a 128-bit BLAKE2b hash of each passage's "id\0title\0text\0".

    Arrow joins the three columns in one pass, so the only per-passage Python work is the hash
    call itself (about 2.5x faster than formatting each passage's string in Python)."""
    if len(ids) != len(titles) or len(ids) != len(texts):
        raise ValueError(f"{len(ids)} ids, {len(titles)} titles and {len(texts)} texts")
    columns = [column if isinstance(column, pa.Array | pa.ChunkedArray) else pa.array(column, pa.string())
               for column in (ids, titles, texts)]  # fmt: skip
    columns[1] = pc.fill_null(columns[1], "")
    joined = pc.binary_join_element_wise(*columns, pa.scalar("", pa.string()), "\x00").cast(pa.binary())
    blake2b = hashlib.blake2b
    digests = b"".join([blake2b(value, digest_size=16).digest() for value in joined.to_pylist()])
    return np.frombuffer(digests, dtype=np.uint64).reshape(-1, 2).copy()


def passage_strings(column: Sequence[str | None] | pa.Array | pa.ChunkedArray,
                    rows: np.ndarray | None = None) -> list[str]:  # fmt: skip
    """A title or text column (or the given rows of it) as Python strings, a missing one as ""."""
    if isinstance(column, pa.Array | pa.ChunkedArray):
        values = (column if rows is None else column.take(pa.array(rows, pa.int64()))).to_pylist()
    else:
        values = column if rows is None else [column[i] for i in rows]
    return [v if v is not None else "" for v in values]


class TokenStore(Protocol):
    """Stored token ids of one tokenization (``storage.passage_tokens.PassageTokenStore``)."""

    tokenization: Tokenization

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, TokenRows]: ...

    def add(self, keys: np.ndarray, passage_ids: pa.Array, rows: TokenRows, passages_version: str) -> None: ...


class TokenFeed:
    """Tokens of each shard: stored rows where there are some, the tokenizer's for the rest."""

    def __init__(self, tokenizer: PassageTokenizer, store: TokenStore | None = None, passages_version: str = "",
                 workers: int | None = None, write: bool = True) -> None:  # fmt: skip
        if store is not None and store.tokenization != tokenizer.tokenization():
            raise ValueError(f"the token store holds tokenization {store.tokenization.key}, "
                             f"the model tokenizes as {tokenizer.tokenization().key}")
        self.store = store
        self.passages_version = passages_version
        self.write = write  # False: only read the store (another process, e.g. rank 0, adds to it)
        self.pool = TokenizePool(tokenizer, workers)
        self.tokenized = 0  # passages tokenized by this feed
        self.reused = 0  # passages whose ids came from the store

    def rows(self, ids: pa.Array, titles: Sequence[str | None] | pa.Array,
             texts: Sequence[str] | pa.Array) -> tuple[TokenRows, np.ndarray]:  # fmt: skip
        """(rows, order): passage ``i`` of the shard is row ``order[i]`` of ``rows``."""
        if self.store is None:
            self.tokenized += len(texts)
            return self.pool.encode(passage_strings(titles), passage_strings(texts)), np.arange(len(texts))
        keys = passage_keys(ids, titles, texts)
        found, stored = self.store.find(keys)
        missing = np.flatnonzero(~found)
        fresh = self.pool.encode(passage_strings(titles, missing), passage_strings(texts, missing))
        if self.write:
            self.store.add(keys[missing], ids.take(pa.array(missing, pa.int64())), fresh, self.passages_version)
        self.tokenized += len(missing)
        self.reused += len(texts) - len(missing)
        order = np.empty(len(texts), np.int64)
        order[np.flatnonzero(found)] = np.arange(len(stored))
        order[missing] = len(stored) + np.arange(len(missing))
        return TokenRows.concat([stored, fresh]), order

    def close(self) -> None:
        self.pool.close()
