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
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
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
_SHARED_LOOKUPS = 2  # workspace and tokenization lookups a process keeps (the last used)


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


@dataclass(frozen=True)
class _Lookup:
    """Sorted passage keys of some parts, never changed once made: a reader searches the one it
    took while another thread builds the next."""

    paths: tuple[str, ...]
    keys: np.ndarray  # (n, 2) uint64, in part order
    where: np.ndarray  # (part number, row in part) per key
    order: np.ndarray  # keys sorted on the high 64 bits
    hi: np.ndarray
    lo: np.ndarray

    @classmethod
    def empty(cls) -> _Lookup:
        none = np.zeros(0, np.uint64)
        return cls((), np.zeros((0, 2), np.uint64), np.zeros((0, 2), np.int64), np.zeros(0, np.int64), none, none)

    def extended(self, root: Path, new: list[str]) -> _Lookup:
        keys, where = [self.keys], [self.where]
        for number, path in enumerate(new, start=len(self.paths)):
            column = pq.read_table(root / path, columns=["passage_key"]).column("passage_key").combine_chunks()
            part_keys = np.frombuffer(column.buffers()[1], dtype=np.uint64, count=2 * len(column),
                                      offset=column.offset * KEY_BYTES).reshape(-1, 2)  # fmt: skip
            keys.append(part_keys)
            where.append(np.stack([np.full(len(part_keys), number), np.arange(len(part_keys))], axis=1))
        all_keys = np.concatenate(keys)
        order = np.argsort(all_keys[:, 0], kind="stable")
        return _Lookup((*self.paths, *new), all_keys, np.concatenate(where), order, all_keys[order, 0],
                       all_keys[order, 1])  # fmt: skip

    def positions(self, keys: np.ndarray) -> np.ndarray:
        """Index rows of ``keys`` (-1 where not stored). Searched on the high 64 bits and checked
        on the low ones: two passages whose high halves collide (odds 2^-64) are just tokenized
        again."""
        out = np.full(len(keys), -1, np.int64)
        if not len(self.keys) or not len(keys):
            return out
        at = np.minimum(np.searchsorted(self.hi, keys[:, 0]), len(self.hi) - 1)
        hit = (self.hi[at] == keys[:, 0]) & (self.lo[at] == keys[:, 1])
        out[hit] = self.order[at[hit]]
        return out


class _SharedLookup:
    """One tokenization's lookup in one workspace, shared by every store of the process.

    A shard task of a mapped encode builds its own store; without sharing, each read the key
    column of every part again (16 bytes a passage: 336 MB for 21M passages) and sorted it. Parts
    never change once committed (new rows are a new part), so the lookup only grows; it starts
    over when a part it holds is gone from the snapshot and from disk (the table was rebuilt)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock = threading.Lock()
        self.current = _Lookup.empty()

    def refresh(self, paths: list[str]) -> _Lookup:
        with self.lock:
            held = set(self.current.paths)
            vanished = [p for p in held.difference(paths) if not (self.root / p).is_file()]
            if vanished:
                self.current, held = _Lookup.empty(), set()
            new = [p for p in paths if p not in held]
            if new:
                self.current = self.current.extended(self.root, new)
            return self.current


_lookups: OrderedDict[tuple[Path, str], _SharedLookup] = OrderedDict()
_lookups_lock = threading.Lock()


def _shared_lookup(root: Path, tokenization_key: str) -> _SharedLookup:
    """The process's lookup for this workspace and tokenization; the last `_SHARED_LOOKUPS` used
    are kept (a lookup costs 56 bytes a passage)."""
    with _lookups_lock:
        key = (root.resolve(), tokenization_key)
        lookup = _lookups.get(key)
        if lookup is None:
            lookup = _lookups[key] = _SharedLookup(key[0])
        _lookups.move_to_end(key)
        while len(_lookups) > _SHARED_LOOKUPS:
            _lookups.popitem(last=False)
        return lookup


class PassageTokenStore:
    """Lookup and incremental writes of one tokenization's rows in a workspace.

    The lookup (sorted passage keys) is built from the parts of this tokenization only, extended
    as parts appear, whoever committed them, and shared by the stores of one process.
    """

    def __init__(self, ws: Workspace, tokenization: Tokenization) -> None:
        self.ws = ws
        self.tokenization = tokenization
        self._dtype = id_dtype(tokenization.id_width)
        self._shared = _shared_lookup(ws.root, tokenization.key)
        self._parts: OrderedDict[str, pa.Table] = OrderedDict()

    def _lookup(self) -> _Lookup:
        """The lookup over at least the parts of this tokenization committed by now."""
        entries = self.ws.snapshot().files(TABLE)
        return self._shared.refresh([e.path for e in entries if e.source == self.tokenization.key])

    def __len__(self) -> int:
        """Passages stored for this tokenization (a passage stored twice counts twice)."""
        return len(self._lookup().keys)

    def _part(self, path: str) -> pa.Table:
        if path in self._parts:
            self._parts.move_to_end(path)
            return self._parts[path]
        table = pq.read_table(self.ws.root / path, columns=["length", "input_ids", "type_ids"])
        self._parts[path] = table
        if len(self._parts) > _CACHED_PARTS:
            self._parts.popitem(last=False)
        return table

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, TokenRows]:
        """(stored?, the stored rows of the keys found, in the keys' order)."""
        lookup = self._lookup()
        keys = np.asarray(keys, dtype=np.uint64).reshape(-1, 2)
        at = lookup.positions(keys)
        found = at >= 0
        where = lookup.where[at[found]]
        chunks, order = [], []
        for number in np.unique(where[:, 0]):
            rows = np.flatnonzero(where[:, 0] == number)
            chunks.append(self._part(lookup.paths[int(number)]).take(pa.array(where[rows, 1])))
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
