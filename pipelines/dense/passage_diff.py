"""Reuse the vectors of unchanged passages when a corpus is encoded again.

Encoding 21M passages takes GPU-hours; a new dump changes a few percent of them. A passage's
vector depends on its id, title and text and on the model, so the previous embeddings directory
gets a ``keys.parquet`` (one 128-bit hash of id + title + text per row, in row order) and a new
encoding looks each passage up there: a hit copies the previous vector, a miss is encoded. The
shards come out in the same layout as a full encoding (same order, same cut), so every index
built from them is the one a full rebuild gives; vectors reused from another batch differ from
re-encoded ones only by float rounding of the batch they were encoded in.

Reuse requires the same model fingerprint, stored dtype and compute precision as the previous
manifest; anything else encodes everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...storage.atomic import atomic_file
from .sharded_encoding import EncodedCorpus, EncodingManifest, read_manifest
from .stored_tokens import passage_keys

KEYS_NAME = "keys.parquet"
KEY_SCHEMA = pa.schema([("hi", pa.uint64()), ("lo", pa.uint64())])


def write_keys(out_dir: Path | str, batches: Iterable[pa.RecordBatch | pa.Table]) -> int:
    """Write ``keys.parquet`` for an embeddings directory from the corpus stream it was encoded
    from (columns passage_id, title, text, same order); returns the row count."""
    path = Path(out_dir) / KEYS_NAME
    rows = 0
    with atomic_file(path) as handle, pq.ParquetWriter(handle, KEY_SCHEMA) as writer:
        for batch in batches:
            keys = passage_keys(batch.column("passage_id").to_pylist(), batch.column("title").to_pylist(),
                                batch.column("text").to_pylist())
            writer.write_table(pa.table({"hi": keys[:, 0], "lo": keys[:, 1]}, schema=KEY_SCHEMA))
            rows += len(keys)
    return rows


@dataclass
class VectorReuse:
    """Lookup of previous vectors by passage key; sorted arrays, 24 bytes a passage."""

    corpus: EncodedCorpus
    hi: np.ndarray  # sorted
    lo: np.ndarray
    rows: np.ndarray  # global row of each key in the previous corpus

    @classmethod
    def open(cls, previous_dir: Path | str | None, wanted: EncodingManifest) -> VectorReuse | None:
        """The previous directory's vectors if they can stand in for ``wanted``'s, else None."""
        if previous_dir is None or not (Path(previous_dir) / KEYS_NAME).is_file():
            return None
        manifest = read_manifest(previous_dir)
        if manifest is None or not manifest.complete or (manifest.model_fingerprint, manifest.dim, manifest.dtype,
                                                         manifest.precision) != (wanted.model_fingerprint, wanted.dim,
                                                                                 wanted.dtype, wanted.precision):
            return None
        keys = pq.read_table(Path(previous_dir) / KEYS_NAME)
        corpus = EncodedCorpus(previous_dir)
        if keys.num_rows != len(corpus):
            return None  # keys of another encoding: not trusted
        hi, lo = keys.column("hi").to_numpy(), keys.column("lo").to_numpy()
        order = np.lexsort((lo, hi))
        return cls(corpus, hi[order], lo[order], order.astype(np.int64))

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Previous global row of each key, -1 where the passage is new or changed."""
        if not len(self.hi):
            return np.full(len(keys), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.hi, keys[:, 0], side="left"), len(self.hi) - 1)
        hit = (self.hi[at] == keys[:, 0]) & (self.lo[at] == keys[:, 1])
        found = np.where(hit, self.rows[at], -1)
        for i in np.flatnonzero(~hit & (self.hi[at] == keys[:, 0])):  # equal high words: scan the run
            j = at[i]
            while j < len(self.hi) and self.hi[j] == keys[i, 0]:
                if self.lo[j] == keys[i, 1]:
                    found[i] = self.rows[j]
                    break
                j += 1
        return found

    def take(self, ids: Sequence[str], titles: Sequence[str], texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(mask of the passages found, their previous float32 vectors in order): the
        ``VectorSource`` that ``encode_corpus(reuse=...)`` asks once per shard."""
        rows = self.lookup(passage_keys(ids, titles, texts))
        found = rows >= 0
        return found, self.corpus.vectors(rows[found])

    def previous_count(self) -> int:
        return len(self.corpus)

    def ids_kept(self, new_ids: pa.Array) -> int:
        """How many previous passage ids are still in the corpus (the rest were removed)."""
        previous = self.corpus.ids().cast(pa.string())
        return int(pc.sum(pc.is_in(previous, value_set=new_ids.cast(pa.string()))).as_py() or 0)
