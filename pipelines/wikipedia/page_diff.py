"""Re-ingest a new dump cleaning only the pages whose content changed.

A weekly English Wikipedia dump changes a few percent of its articles, but a full ingest
re-cleans all of them. Here every page gets a content hash (title, namespace, redirect target,
wikitext); a page whose id and hash match the previous ingest is not cleaned again: its rows of
``articles``, ``passages`` and ``category_links`` are copied from the previous tables. Cleaning is
deterministic, so the copied rows are exactly what cleaning would give, and the chunks this
module yields (``ChunkResult``, in dump order) are row for row those of a full ingest: the
workspace ends up identical, only faster. Pages absent from the new dump simply get no rows.

The previous hashes live in a Parquet file (``page_id``, ``hash``) written next to the tables
after each ingest; ``PageHashes`` keeps them as sorted numpy arrays (24 bytes a page), so a
lookup is a binary search, not a Python dict of 20M entries.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ...storage.atomic import atomic_file
from .dump_reader import RawPage
from .ingest import (
    ARTICLE_SCHEMA,
    CATEGORY_LINK_SCHEMA,
    PASSAGE_SCHEMA,
    ChunkResult,
    IngestOptions,
    _page_kind,
    process_chunk,
)

HASH_SCHEMA = pa.schema([("page_id", pa.int64()), ("hash", pa.binary(16))])


def page_hash(page: RawPage) -> bytes:
    """128-bit hash of everything cleaning reads from a page (its id is the key, not hashed)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (page.title, str(page.namespace), page.redirect_target, page.text):
        digest.update(b"\x00" if part is None else b"\x01" + part.encode("utf-8", "surrogatepass") + b"\x00")
    digest.update(b"\x01" if page.invalid_utf8 else b"\x00")
    return digest.digest()


class PageHashes:
    """The (page id, content hash) pairs of one ingest, searchable without a per-page object."""

    def __init__(self, page_ids: np.ndarray, hashes: np.ndarray) -> None:
        order = np.argsort(page_ids, kind="stable")
        self.page_ids = np.asarray(page_ids, dtype=np.int64)[order]
        self.hashes = np.asarray(hashes).reshape(-1, 16)[order] if len(order) else np.zeros((0, 16), np.uint8)

    @classmethod
    def empty(cls) -> PageHashes:
        return cls(np.zeros(0, np.int64), np.zeros((0, 16), np.uint8))

    @classmethod
    def read(cls, path: Path | str) -> PageHashes:
        table = pq.read_table(path, schema=HASH_SCHEMA)
        raw = table.column("hash").combine_chunks()
        data = np.frombuffer(raw.buffers()[1], dtype=np.uint8)[raw.offset * 16:(raw.offset + len(raw)) * 16]
        return cls(table.column("page_id").to_numpy(), data.reshape(-1, 16))

    def __len__(self) -> int:
        return len(self.page_ids)

    def contains(self, page_ids: np.ndarray) -> np.ndarray:
        """True where a page id was in the previous ingest (with any content)."""
        page_ids = np.asarray(page_ids, dtype=np.int64)
        if not len(self.page_ids) or not len(page_ids):
            return np.zeros(len(page_ids), dtype=bool)
        at = np.minimum(np.searchsorted(self.page_ids, page_ids), len(self.page_ids) - 1)
        return self.page_ids[at] == page_ids

    def unchanged(self, page_ids: np.ndarray, hashes: np.ndarray) -> np.ndarray:
        """True where a page had this id and this exact content in the previous ingest."""
        page_ids = np.asarray(page_ids, dtype=np.int64)
        if not len(self.page_ids) or not len(page_ids):
            return np.zeros(len(page_ids), dtype=bool)
        at = np.minimum(np.searchsorted(self.page_ids, page_ids), len(self.page_ids) - 1)
        return (self.page_ids[at] == page_ids) & (self.hashes[at] == hashes.reshape(-1, 16)).all(axis=1)


class PageHashWriter:
    """Streams the new ingest's page hashes to a Parquet file that appears only on ``commit``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = contextlib.ExitStack()
        self.writer = pq.ParquetWriter(self._file.enter_context(atomic_file(path)), HASH_SCHEMA)

    def write(self, page_ids: list[int], hashes: list[bytes]) -> None:
        self.writer.write_table(pa.table({"page_id": pa.array(page_ids, pa.int64()),
                                          "hash": pa.array(hashes, pa.binary(16))}, schema=HASH_SCHEMA))

    def commit(self) -> None:
        self.writer.close()
        self._file.close()

    def abort(self) -> None:
        self.writer.close()
        aborted = RuntimeError("page hash file aborted")
        self._file.__exit__(type(aborted), aborted, None)  # the temporary file is removed


@dataclass
class PreviousRows:
    """The previous ``articles`` / ``passages`` / ``category_links`` tables, read by page id.

    Lookups filter on the chunk's id range as well as its ids, so Parquet row-group statistics
    skip the parts that cannot hold them (tables are written in dump order, and dumps are in
    page-id order).
    """

    articles: ds.Dataset
    passages: ds.Dataset
    category_links: ds.Dataset

    def rows(self, page_ids: list[int]) -> tuple[pa.Table, pa.Table, pa.Table]:
        if not page_ids:
            return (ARTICLE_SCHEMA.empty_table(), PASSAGE_SCHEMA.empty_table(), CATEGORY_LINK_SCHEMA.empty_table())
        wanted = pa.array(page_ids, pa.int64())
        lo, hi = min(page_ids), max(page_ids)

        def take(dataset: ds.Dataset, column: str, schema: pa.Schema) -> pa.Table:
            key = pc.field(column)
            table = dataset.to_table(columns=schema.names, filter=(key >= lo) & (key <= hi) & key.isin(wanted))
            return table.cast(schema)

        return (take(self.articles, "article_id", ARTICLE_SCHEMA), take(self.passages, "article_id", PASSAGE_SCHEMA),
                take(self.category_links, "page_id", CATEGORY_LINK_SCHEMA))


@dataclass
class DiffCounts:
    """Pages of the new dump by fate, and how many previous pages it still has."""

    recleaned: int = 0
    reused: int = 0
    reused_passages: int = 0
    still_present: int = 0  # pages of the new dump whose id the previous ingest had

    def removed(self, previous: PageHashes) -> int:
        return len(previous) - self.still_present


def _in_page_order(tables: list[pa.Table], key: str, order: dict[int, int]) -> pa.Table:
    """Rows of several tables merged by the page order of the chunk, each page's rows kept in order."""
    table = pa.concat_tables(tables)
    if not table.num_rows:
        return table
    rank = pa.array([order[v] for v in table.column(key).to_pylist()], pa.int64())
    seq = pa.array(np.arange(table.num_rows, dtype=np.int64))
    keyed = table.append_column("__rank", rank).append_column("__seq", seq)
    sort_keys = [("__rank", "ascending")]
    if "position" in table.column_names:
        sort_keys.append(("position", "ascending"))
    sort_keys.append(("__seq", "ascending"))
    return keyed.take(pc.sort_indices(keyed, sort_keys=sort_keys)).drop(["__rank", "__seq"])


def diff_chunk(pages: list[RawPage], options: IngestOptions, index: int, previous: PageHashes,
               old: PreviousRows | None, counts: DiffCounts, hashes: PageHashWriter | None = None) -> ChunkResult:
    """The rows of one chunk, cleaning only its new and changed pages (see the module doc)."""
    digests = [page_hash(page) for page in pages]
    if hashes is not None:
        hashes.write([p.page_id for p in pages], digests)
    page_ids = np.array([p.page_id for p in pages], np.int64)
    counts.still_present += int(previous.contains(page_ids).sum())
    same = previous.unchanged(page_ids, np.frombuffer(b"".join(digests), np.uint8)) if old is not None else \
        np.zeros(len(pages), bool)
    changed = [page for page, keep in zip(pages, same, strict=True) if not keep]
    kept_ids = [page.page_id for page, keep in zip(pages, same, strict=True) if keep]
    cleaned = process_chunk(changed, options, index)
    counts.recleaned += len(changed)
    counts.reused += len(kept_ids)
    if not kept_ids:
        return ChunkResult(index, len(pages), pages[0].page_id if pages else None,
                           pages[-1].page_id if pages else None, cleaned.articles, cleaned.passages,
                           cleaned.category_links, cleaned.counts, cleaned.skipped, cleaned.problems)
    articles, passages, links = old.rows(kept_ids)  # type: ignore[union-attr]
    if articles.num_rows != len(set(kept_ids)):
        raise ValueError(f"chunk {index}: the previous articles table lacks pages the previous page hashes list; "
                         "its hashes file is stale (run the ingest in full)")
    order = {page.page_id: i for i, page in enumerate(pages)}
    merged_counts = Counter(cleaned.counts)
    for ns, redirect in zip(articles.column("namespace").to_pylist(), articles.column("is_redirect").to_pylist(),
                            strict=True):
        merged_counts["total"] += 1
        merged_counts[_page_kind(ns, redirect)] += 1
    merged_counts["passages"] += passages.num_rows
    counts.reused_passages += passages.num_rows
    return ChunkResult(
        index=index, pages=len(pages), first_page_id=pages[0].page_id, last_page_id=pages[-1].page_id,
        articles=_in_page_order([cleaned.articles, articles], "article_id", order),
        passages=_in_page_order([cleaned.passages, passages], "article_id", order),
        category_links=_in_page_order([cleaned.category_links, links], "page_id", order),
        counts=dict(merged_counts), skipped=cleaned.skipped, problems=cleaned.problems,
    )


def diff_chunks(raw_chunks: Iterable[tuple[int, list[RawPage]]], options: IngestOptions, previous: PageHashes,
                old: PreviousRows | None, counts: DiffCounts, hashes: PageHashWriter | None = None
                ) -> Iterator[ChunkResult]:
    """``diff_chunk`` over a dump's raw chunks, in order (what ``flows.stages.wikipedia.ingest_dump`` writes)."""
    for index, pages in raw_chunks:
        yield diff_chunk(pages, options, index, previous, old, counts, hashes)
