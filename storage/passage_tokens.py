"""The `passage_tokens` table: every passage's token ids, stored once per tokenization.

Tokenizing 21M passages costs about two CPU-hours, and every model sharing a tokenizer (each
round of training, each re-encode, each re-index) would pay it again. So token ids are a
workspace table, keyed by

- the tokenization (``Tokenization.key``): the tokenizer's content fingerprint (its files, not
  its name), the passage input format (title/text pair or joined) and the maximum length;
- the passage: a 128-bit hash of its id, title and text (``passage_key``), so a passage that
  changes in a new passages snapshot gets new tokens and an unchanged one keeps its own: a
  re-index tokenizes only the new and changed passages.

Ids are stored as little-endian ``uint16`` when the vocabulary fits (``uint32`` otherwise) in a
binary column, segment ids as ``uint8`` bytes: about 2-3 bytes a token, and a batch of rows
reads back as one flat array without a per-row copy.

Each chunk of newly tokenized passages is one Parquet part committed on its own (a snapshot
switch, `tables.Transaction`): a kill leaves the chunks committed before it and nothing
half-visible, and the next run finds those and tokenizes only the rest. Parts carry the
tokenization key as their source, so a lookup reads only its own tokenization's parts.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .schemas import schema_for

if TYPE_CHECKING:
    from .workspace import Workspace

TABLE = "passage_tokens"
SCHEMA = schema_for(TABLE)
KEY_BYTES = 16
_CACHED_PARTS = 4  # parts whose token columns stay in memory between lookups


def id_width(vocab_size: int) -> int:
    """Bytes per stored token id: 2 when every id fits in uint16, else 4."""
    return 2 if vocab_size <= 1 << 16 else 4


def id_dtype(width: int) -> np.dtype:
    if width not in (2, 4):
        raise ValueError(f"stored token ids are 2 or 4 bytes wide, got {width}")
    return np.dtype("<u2" if width == 2 else "<u4")


@dataclass(frozen=True)
class Tokenization:
    """What token ids depend on besides the passage; ``key`` names it in the table."""

    tokenizer: str  # fingerprint of the tokenizer's content
    passage_input: str
    max_length: int
    id_width: int

    @property
    def key(self) -> str:
        text = f"{self.tokenizer}|{self.passage_input}|{self.max_length}|{self.id_width}"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class TokenRows:
    """Passages' token ids as flat arrays: row ``i`` is ``input_ids[starts[i]:starts[i] + lengths[i]]``."""

    input_ids: np.ndarray  # uint16 or uint32
    type_ids: np.ndarray  # uint8, same length
    lengths: np.ndarray  # int32 per row

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths, dtype=np.int64)[:-1]]).astype(np.int64)

    @classmethod
    def concat(cls, parts: list[TokenRows]) -> TokenRows:
        if not parts:
            return cls(np.zeros(0, np.uint16), np.zeros(0, np.uint8), np.zeros(0, np.int32))
        return cls(np.concatenate([p.input_ids for p in parts]), np.concatenate([p.type_ids for p in parts]),
                   np.concatenate([p.lengths for p in parts]).astype(np.int32))




def _binary_rows(flat: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """One binary value per row over a flat array, without copying rows one by one."""
    offsets = np.concatenate([[0], np.cumsum(lengths.astype(np.int64) * flat.itemsize)]).astype(np.int32)
    return pa.Array.from_buffers(pa.binary(), len(lengths), [None, pa.py_buffer(offsets),
                                                            pa.py_buffer(np.ascontiguousarray(flat).view(np.uint8))])


def _flat_values(column: pa.Array, dtype: np.dtype) -> np.ndarray:
    """The values of a binary column's rows, concatenated, as ``dtype``."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32, count=len(column) + 1, offset=column.offset * 4)
    data = column.buffers()[2]
    if data is None or offsets[-1] == offsets[0]:
        return np.zeros(0, dtype)
    return np.frombuffer(data, dtype=np.uint8)[offsets[0]:offsets[-1]].view(dtype)


def key_bytes(keys: np.ndarray) -> pa.Array:
    """(n, 2) uint64 passage keys as the table's 16-byte values."""
    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    return pa.Array.from_buffers(pa.binary(KEY_BYTES), len(keys), [None, pa.py_buffer(keys.view(np.uint8))])


class PassageTokenStore:
    """Lookup and incremental writes of one tokenization's rows in a workspace.

    The lookup index (sorted passage keys, 24 bytes a passage) is built from the parts of this
    tokenization only and extended as parts appear, whoever committed them.
    """

    def __init__(self, ws: Workspace, tokenization: Tokenization) -> None:
        self.ws = ws
        self.tokenization = tokenization
        self._dtype = id_dtype(tokenization.id_width)
        self._paths: list[str] = []
        self._keys = np.zeros((0, 2), np.uint64)
        self._where = np.zeros((0, 2), np.int64)  # (part number, row in part) per key
        self._order = np.zeros(0, np.int64)
        self._hi = self._lo = np.zeros(0, np.uint64)
        self._parts: OrderedDict[int, pa.Table] = OrderedDict()

    def _refresh(self) -> None:
        """Index the parts of this tokenization committed since the last look."""
        entries = [e for e in self.ws.snapshot().files(TABLE) if e.source == self.tokenization.key]
        new = [e.path for e in entries if e.path not in set(self._paths)]
        if not new:
            return
        keys, where = [self._keys], [self._where]
        for path in new:
            column = pq.read_table(self.ws.root / path, columns=["passage_key"]).column("passage_key").combine_chunks()
            part_keys = np.frombuffer(column.buffers()[1], dtype=np.uint64, count=2 * len(column),
                                      offset=column.offset * KEY_BYTES).reshape(-1, 2)
            keys.append(part_keys)
            where.append(np.stack([np.full(len(part_keys), len(self._paths)), np.arange(len(part_keys))], axis=1))
            self._paths.append(path)
        self._keys, self._where = np.concatenate(keys), np.concatenate(where)
        self._order = np.argsort(self._keys[:, 0], kind="stable")
        self._hi, self._lo = self._keys[self._order, 0], self._keys[self._order, 1]

    def __len__(self) -> int:
        """Passages stored for this tokenization (a passage stored twice counts twice)."""
        self._refresh()
        return len(self._keys)

    def _positions(self, keys: np.ndarray) -> np.ndarray:
        """Index rows of ``keys`` (-1 where not stored). Searched on the high 64 bits and checked
        on the low ones: two passages whose high halves collide (odds 2^-64) are just tokenized
        again."""
        out = np.full(len(keys), -1, np.int64)
        if not len(self._keys) or not len(keys):
            return out
        at = np.minimum(np.searchsorted(self._hi, keys[:, 0]), len(self._hi) - 1)
        hit = (self._hi[at] == keys[:, 0]) & (self._lo[at] == keys[:, 1])
        out[hit] = self._order[at[hit]]
        return out

    def _part(self, number: int) -> pa.Table:
        if number in self._parts:
            self._parts.move_to_end(number)
            return self._parts[number]
        table = pq.read_table(self.ws.root / self._paths[number], columns=["length", "input_ids", "type_ids"])
        self._parts[number] = table
        if len(self._parts) > _CACHED_PARTS:
            self._parts.popitem(last=False)
        return table

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, TokenRows]:
        """(stored?, the stored rows of the keys found, in the keys' order)."""
        self._refresh()
        keys = np.asarray(keys, dtype=np.uint64).reshape(-1, 2)
        at = self._positions(keys)
        found = at >= 0
        where = self._where[at[found]]
        chunks, order = [], []
        for number in np.unique(where[:, 0]):
            rows = np.flatnonzero(where[:, 0] == number)
            chunks.append(self._part(int(number)).take(pa.array(where[rows, 1])))
            order.append(rows)
        if not chunks:
            return found, TokenRows.concat([])
        taken = pa.concat_tables(chunks).take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
        lengths = taken.column("length").to_numpy().astype(np.int32)
        return found, TokenRows(_flat_values(taken.column("input_ids"), self._dtype),
                                _flat_values(taken.column("type_ids"), np.dtype(np.uint8)), lengths)

    def add(self, keys: np.ndarray, passage_ids: pa.Array, rows: TokenRows, passages_version: str) -> None:
        """Commit these passages' rows as one part (visible whole, or not at all after a kill)."""
        if not len(rows):
            return
        t = self.tokenization
        n = len(rows)
        table = pa.table({
            "tokenization": pa.array([t.key] * n), "tokenizer": pa.array([t.tokenizer] * n),
            "passage_input": pa.array([t.passage_input] * n), "max_length": pa.array([t.max_length] * n, pa.int32()),
            "passage_key": key_bytes(keys), "passage_id": passage_ids.cast(pa.string()),
            "length": pa.array(rows.lengths, pa.int32()),
            "input_ids": _binary_rows(rows.input_ids.astype(self._dtype, copy=False), rows.lengths),
            "type_ids": _binary_rows(rows.type_ids.astype(np.uint8, copy=False), rows.lengths),
            "id_width": pa.array([t.id_width] * n, pa.int8()), "passages_version": pa.array([passages_version] * n),
        }, schema=SCHEMA)  # fmt: skip
        with self.ws.transaction(f"tokenize-{t.key}") as tx:
            tx.write(TABLE, table, source=t.key)
