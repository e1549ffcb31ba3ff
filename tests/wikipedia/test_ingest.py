"""Chunked ingest: rows of the three tables, counted skips, order, chunk stability, errors."""

from __future__ import annotations

import bz2
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pyarrow as pa
import pytest

from odqa.pipelines.wikipedia import ingest
from odqa.pipelines.wikipedia.dump_reader import DumpError, RawPage, iter_pages
from odqa.pipelines.wikipedia.ingest import (
    IngestOptions,
    _pool_context,
    iter_chunks,
    iter_raw_chunks,
    ordered_results,
    process_chunk,
)
from odqa.pipelines.wikipedia.wikitext_cleaner import clean_wikitext
from odqa.storage.schemas import SCHEMAS
from tests.wikipedia.dumps import Page, dump_bytes, write_bz2

LONG = " ".join(f"w{i}" for i in range(230))
PAGES = [
    Page(
        1,
        "Alpha",
        f"'''Alpha''' is a [[letter]].{{{{Infobox|x=1}}}} {LONG}\n[[Category:Letters]][[Category:greek_letters|a]]",
    ),
    Page(
        2, "Alfa", "#REDIRECT [[Alpha]]\n[[Category:Redirects from alternative spellings]]", redirect="Alpha"
    ),
    Page(3, "Empty", None),
    Page(4, "Category:Letters", "Letters. [[Category:Writing systems]] [[Category:Symbols]]", ns=14),
    Page(5, "File:Alpha.svg", "An alpha. [[Category:Alphabet images]]", ns=6),
    Page(6, "Template:Infobox", "{{{1}}} [[Category:Infobox templates]]", ns=10),
    Page(7, "Beta (disambiguation)", "'''Beta''' may refer to:\n* [[Beta]]\n{{disambiguation}}"),
    Page(8, "Only markup", "{{Infobox|x=1}}\n[[Category:Stubs]]"),
    Page(9, "Gamma", "'''Gamma''' is the third letter."),
]


def _raw(pages: list[Page]) -> list[RawPage]:
    return [
        RawPage(p.page_id, p.title, p.ns or 0, p.redirect, p.text, byte_offset=i * 100)
        for i, p in enumerate(pages)
    ]


def test_process_chunk_rows_and_counts() -> None:
    result = process_chunk(_raw(PAGES), IngestOptions(), index=7)
    assert result.index == 7 and result.pages == 9
    assert (result.first_page_id, result.last_page_id) == (1, 9)

    articles = result.articles.to_pylist()
    assert [a["article_id"] for a in articles] == [p.page_id for p in PAGES]  # every page, every namespace
    assert articles[1] == {
        "article_id": 2, "title": "Alfa", "namespace": 0, "is_redirect": True, "redirect_target": "Alpha"
    }  # fmt: skip
    assert [a["namespace"] for a in articles] == [0, 0, 0, 14, 6, 10, 0, 0, 0]

    passages = result.passages.to_pylist()
    assert {p["article_id"] for p in passages} == {1, 9}  # no redirect, empty, disambiguation, non-article
    alpha = [p for p in passages if p["article_id"] == 1]
    assert [p["passage_id"] for p in alpha] == ["1_0", "1_1", "1_2"]
    assert [p["position"] for p in alpha] == [0, 1, 2]
    assert [len(p["text"].split()) for p in alpha] == [100, 100, 34]
    assert alpha[0]["text"].startswith("Alpha is a letter. w0 w1") and alpha[0]["title"] == "Alpha"
    assert passages[-1] == {"passage_id": "9_0", "article_id": 9, "title": "Gamma",
                            "text": "Gamma is the third letter.", "position": 0}  # fmt: skip

    links = [
        (r["page_id"], r["title"], r["namespace"], r["category"], r["kind"])
        for r in result.category_links.to_pylist()
    ]
    assert links == [
        (1, "Alpha", 0, "Letters", "page"),
        (1, "Alpha", 0, "Greek letters", "page"),
        (2, "Alfa", 0, "Redirects from alternative spellings", "page"),
        (4, "Category:Letters", 14, "Writing systems", "subcat"),
        (4, "Category:Letters", 14, "Symbols", "subcat"),
        (5, "File:Alpha.svg", 6, "Alphabet images", "file"),
        (8, "Only markup", 0, "Stubs", "page"),
    ]
    assert result.counts == {
        "total": 9, "article": 5, "redirect": 1, "category": 1, "file": 1, "other": 1, "passages": 4
    }  # fmt: skip
    assert result.skipped == {"empty_text": 1, "disambiguation": 1, "empty_after_cleaning": 1}
    assert result.problems == []


def test_disambiguation_pages_can_be_kept() -> None:
    result = process_chunk(_raw(PAGES[6:7]), IngestOptions(skip_disambiguation=False))
    assert result.passages.column("text").to_pylist() == ["Beta may refer to: Beta"]


def test_invalid_utf8_page_is_recorded_but_its_passages_skipped() -> None:
    page = RawPage(11, "Broken", 0, None, "caf\ufffd text", byte_offset=1234, invalid_utf8=True)
    result = process_chunk([page], IngestOptions())
    assert result.articles.num_rows == 1 and result.passages.num_rows == 0
    assert result.skipped == {"invalid_utf8": 1}
    assert result.problems == ["page 11 'Broken' at byte 1234: invalid UTF-8, passages skipped"]


def test_page_the_cleaner_fails_on_is_counted_and_named(monkeypatch) -> None:
    """Fault injection: a cleaner failure on one page must not abort the chunk."""

    def fail_on_deep(text: str, **kwargs) -> str:
        if "deep" in text:
            raise RecursionError("maximum recursion depth exceeded")
        return clean_wikitext(text, **kwargs)

    monkeypatch.setattr(ingest, "clean_wikitext", fail_on_deep)
    pages = [RawPage(21, "Deep", 0, None, "deep markup", byte_offset=99), *_raw(PAGES[-1:])]
    result = process_chunk(pages, IngestOptions())
    assert result.skipped == {"clean_error": 1}
    assert result.passages.column("article_id").to_pylist() == [9]
    assert result.problems == [
        "page 21 'Deep' at byte 99: cleaning failed: RecursionError('maximum recursion depth exceeded')"
    ]


def test_tables_match_the_storage_schemas() -> None:
    result = process_chunk(_raw(PAGES), IngestOptions())
    for name, table in [("articles", result.articles), ("passages", result.passages),
                        ("category_links", result.category_links)]:  # fmt: skip
        expected = pa.schema([f for f in SCHEMAS[name] if f.name != "source"])
        assert table.schema.equals(expected), name


def _many_pages(n: int) -> list[Page]:
    return [
        Page(i, f"Page {i}", f"Text of page {i}. " * (i % 7 + 1) + f"[[Category:C{i % 3}]]")
        for i in range(1, n + 1)
    ]


def _rows(chunks) -> dict[str, list]:
    out: dict[str, list] = {"articles": [], "passages": [], "category_links": [], "index": []}
    for c in chunks:
        out["index"].append(c.index)
        for name in ("articles", "passages", "category_links"):
            out[name].extend(getattr(c, name).to_pylist())
    return out


def test_chunks_are_stable_ordered_and_resumable(tmp_path: Path) -> None:
    path = write_bz2(tmp_path / "d.xml.bz2", _many_pages(23))
    options = IngestOptions(chunk_pages=4, workers=1)
    serial = list(iter_chunks(path, options))
    assert [c.index for c in serial] == list(range(6))
    assert [c.pages for c in serial] == [4, 4, 4, 4, 4, 3]
    assert [c.first_page_id for c in serial] == [1, 5, 9, 13, 17, 21]

    parallel = list(iter_chunks(path, IngestOptions(chunk_pages=4, workers=2)))
    assert _rows(parallel) == _rows(serial)  # same rows, same order, with a process pool

    resumed = list(iter_chunks(path, options, start_chunk=4))
    assert [c.index for c in resumed] == [4, 5]
    assert _rows(resumed)["passages"] == _rows(serial[4:])["passages"]


def test_any_executor_gives_chunks_in_order_with_a_bounded_number_in_flight(tmp_path: Path) -> None:
    """`ordered_results` over another executor (as a task runner uses it): later chunks finish
    first, yet results come in chunk order, equal to the local path, never more than the bound
    submitted and not yet delivered."""
    path = write_bz2(tmp_path / "d.xml.bz2", _many_pages(23))
    options = IngestOptions(chunk_pages=4, workers=1)
    in_flight: set[int] = set()
    most = 0

    def slow_early(pages: list[RawPage], index: int):
        time.sleep(0.02 * (6 - index))
        return process_chunk(pages, options, index)

    with ThreadPoolExecutor(3) as pool:

        def submit(index: int, pages: list[RawPage]):
            nonlocal most
            in_flight.add(index)
            most = max(most, len(in_flight))
            return pool.submit(slow_early, pages, index)

        chunks = []
        for chunk in ordered_results(iter_raw_chunks(path, options, start_chunk=1), submit, max_in_flight=3):
            in_flight.discard(chunk.index)
            chunks.append(chunk)
    assert [c.index for c in chunks] == [1, 2, 3, 4, 5]
    assert most == 3
    assert _rows(chunks) == _rows(iter_chunks(path, options, start_chunk=1))
    with pytest.raises(ValueError, match="max_in_flight"):
        next(ordered_results(iter_raw_chunks(path, options), submit, max_in_flight=0))


def test_pool_works_beside_other_threads(tmp_path: Path) -> None:
    """With other Python threads alive (as under Prefect) workers come from the fork server."""
    path = write_bz2(tmp_path / "d.xml.bz2", _many_pages(9))
    options = IngestOptions(chunk_pages=3, workers=2)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    try:
        assert _pool_context().get_start_method() != "fork"
        pooled = list(iter_chunks(path, options))
    finally:
        stop.set()
        thread.join()
    # back to fork once no other thread is alive (other tests' Prefect server threads may be)
    expected = "fork" if threading.active_count() == 1 else "forkserver"
    assert _pool_context().get_start_method() == expected
    assert _rows(pooled) == _rows(iter_chunks(path, IngestOptions(chunk_pages=3, workers=1)))


KILLED_READER = """
import os, sys, time
import psutil
from odqa.pipelines.wikipedia.ingest import IngestOptions, iter_chunks
for chunk in iter_chunks(sys.argv[1], IngestOptions(chunk_pages=1, workers=2)):
    print(" ".join(str(p.pid) for p in psutil.Process().children(recursive=True)), flush=True)
    time.sleep(60)
"""


def test_workers_exit_when_the_reader_is_killed(tmp_path: Path) -> None:
    path = write_bz2(tmp_path / "d.xml.bz2", _many_pages(40))
    reader = subprocess.Popen(
        [sys.executable, "-c", KILLED_READER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        pids = [int(pid) for pid in reader.stdout.readline().split()]
    finally:
        reader.kill()
        reader.wait()
    assert pids, "the reader had worker processes"
    gone, alive = psutil.wait_procs(
        [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)], timeout=10
    )
    for orphan in alive:
        orphan.kill()
    assert not alive, f"orphaned workers: {alive}"


def test_chunks_also_end_on_text_size(tmp_path: Path) -> None:
    path = write_bz2(tmp_path / "d.xml.bz2", _many_pages(10))
    sizes = [len(p.text or "") for p in iter_pages(path)]
    chunks = list(iter_chunks(path, IngestOptions(chunk_pages=100, chunk_chars=2 * min(sizes), workers=1)))
    assert sum(c.pages for c in chunks) == 10 and len(chunks) > 1
    assert all(c.pages <= 2 for c in chunks)


@pytest.mark.parametrize("workers", [1, 2])
def test_truncated_dump_yields_complete_chunks_then_raises(tmp_path: Path, workers: int) -> None:
    pages = [Page(i, f"P{i}", f"Words {i} " * 300) for i in range(1, 120)]
    data = bz2.compress(dump_bytes(pages), compresslevel=1)
    path = tmp_path / "cut.xml.bz2"
    path.write_bytes(data[: len(data) // 2])
    got = []
    with pytest.raises(DumpError, match=r"cut\.xml\.bz2: truncated bz2 stream"):
        for chunk in iter_chunks(path, IngestOptions(chunk_pages=10, workers=workers)):
            got.append(chunk)
    assert got, "chunks before the damage are delivered"
    assert [c.index for c in got] == list(range(len(got)))
    assert all(c.pages == 10 for c in got)  # the partial chunk at the damage is not emitted


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        IngestOptions(words_per_passage=0)


def test_category_pages_record_soft_redirects_and_hidden_flag() -> None:
    """{{Category redirect|X}} becomes the page's redirect; __HIDDENCAT__ files it under
    "Hidden categories", as MediaWiki does, so the domain labeller can follow / skip them."""
    from odqa.pipelines.wikipedia.dump_reader import RawPage
    from odqa.pipelines.wikipedia.ingest import IngestOptions, process_chunk

    pages = [
        RawPage(1, "Category:Soccer players", 14, None, "{{Category redirect|Association football players}}", 0),
        RawPage(2, "Category:CS1 maint", 14, None, "__HIDDENCAT__\n[[Category:Tracking categories]]", 0),
        RawPage(3, "Category:Physics", 14, None, "{{Commons category}}\n[[Category:Science]]", 0),
    ]
    result = process_chunk(pages, IngestOptions(workers=1))
    articles = {r["title"]: r for r in result.articles.to_pylist()}
    assert articles["Category:Soccer players"]["redirect_target"] == "Category:Association football players"
    assert articles["Category:Soccer players"]["is_redirect"] is True
    assert articles["Category:Physics"]["is_redirect"] is False
    links = {(r["title"], r["category"]) for r in result.category_links.to_pylist()}
    assert links == {
        ("Category:CS1 maint", "Tracking categories"),
        ("Category:CS1 maint", "Hidden categories"),
        ("Category:Physics", "Science"),
    }
