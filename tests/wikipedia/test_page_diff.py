"""The page diff of an incremental ingest gives the rows of a full ingest, cleaning only changed pages."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow.dataset as ds

from odqa.flows.plumbing.sample_data import SAMPLE_DUMP
from odqa.pipelines.wikipedia.ingest import IngestOptions, iter_raw_chunks, process_chunk
from odqa.pipelines.wikipedia.page_diff import DiffCounts, PageHashes, PreviousRows, diff_chunk, page_hash


def test_diff_chunk_equals_a_full_clean_and_cleans_only_changed_pages() -> None:
    options = IngestOptions(workers=0)
    pages = [page for _, chunk in iter_raw_chunks(SAMPLE_DUMP, options) for page in chunk]
    before = process_chunk(pages, options)
    previous = PageHashes(np.array([p.page_id for p in pages]),
                          np.frombuffer(b"".join(page_hash(p) for p in pages), np.uint8))
    old = PreviousRows(ds.dataset(before.articles), ds.dataset(before.passages), ds.dataset(before.category_links))

    articles = [p for p in pages if p.namespace == 0 and p.redirect_target is None and p.text]
    edited = dataclasses.replace(articles[0], text="A new opening sentence about the river.\n\n" + articles[0].text)
    removed = articles[1]
    new_pages = [edited if p is articles[0] else p for p in pages if p is not removed]
    counts = DiffCounts()
    got = diff_chunk(new_pages, options, 0, previous, old, counts)
    want = process_chunk(new_pages, options)

    assert counts.recleaned == 1 and counts.reused == len(pages) - 2 and counts.removed(previous) == 1
    for table in ("articles", "passages", "category_links"):
        assert getattr(got, table).to_pylist() == getattr(want, table).to_pylist(), table
    assert got.counts == want.counts
    assert page_hash(edited) != page_hash(articles[0]) and page_hash(articles[2]) == page_hash(articles[2])
