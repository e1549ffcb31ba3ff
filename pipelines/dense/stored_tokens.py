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

from ...storage.passage_tokens import Tokenization, TokenRows
from .passage_tokenizer import PassageTokenizer, TokenizePool


def passage_keys(ids: Sequence[str], titles: Sequence[str | None], texts: Sequence[str]) -> np.ndarray:
    """(n, 2) uint64: a 128-bit hash of each passage's id, title and text."""
    if len(ids) != len(titles) or len(ids) != len(texts):
        raise ValueError(f"{len(ids)} ids, {len(titles)} titles and {len(texts)} texts")
    blake2b = hashlib.blake2b
    digests = b"".join(  # one call per passage over "id\0title\0text\0": the stream hashed part by part before
        blake2b(f"{pid}\x00{title or ''}\x00{text or ''}\x00".encode("utf-8", "surrogatepass"), digest_size=16).digest()
        for pid, title, text in zip(ids, titles, texts, strict=True))
    return np.frombuffer(digests, dtype=np.uint64).reshape(-1, 2).copy()


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

    def rows(self, ids: pa.Array, titles: Sequence[str | None], texts: Sequence[str]) -> tuple[TokenRows, np.ndarray]:
        """(rows, order): passage ``i`` of the shard is row ``order[i]`` of ``rows``."""
        if self.store is None:
            self.tokenized += len(texts)
            return self.pool.encode(titles, texts), np.arange(len(texts))
        keys = passage_keys(ids.to_pylist(), titles, texts)
        found, stored = self.store.find(keys)
        missing = np.flatnonzero(~found)
        fresh = self.pool.encode([titles[i] for i in missing], [texts[i] for i in missing])
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
