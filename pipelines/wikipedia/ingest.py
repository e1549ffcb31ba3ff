"""Dump -> rows of ``articles``, ``passages`` and ``category_links``, chunk by chunk.

Why chunks: a chunk is a fixed run of consecutive pages (boundaries depend only on the dump and
the options), so it is the unit of parallel work, of ordered output and of resumption: chunk
``i`` always covers the same pages, and a killed ingest can skip the chunks it already wrote.

Why this process layout: the reader (bz2 + expat) is one sequential stream, so it stays in the
calling process and hands chunks of raw pages to a pool of worker processes that clean and
split them (the expensive part). At most ``2 * workers`` chunks are in flight, which bounds
memory, and results are yielded in chunk order, which keeps the output deterministic.
``iter_raw_chunks`` + ``process_chunk`` + ``ordered_results`` are the same three parts for any
other executor (an orchestrator's task runner, a cluster): chunks are plain picklable data, so
the cleaning can run anywhere and the output stays the same.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from ...storage.schemas import row_schema
from ..categories.graph_input import soft_category_redirect
from .dump_reader import DumpError, RawPage, iter_pages
from .passages import split_passages
from .wikitext_cleaner import clean_wikitext, extract_categories, is_disambiguation

MAIN_NAMESPACE = 0
FILE_NAMESPACE = 6
CATEGORY_NAMESPACE = 14
#: MediaWiki's ``cl_type`` of a category edge, by the namespace of the categorized page.
LINK_KIND = {MAIN_NAMESPACE: "page", FILE_NAMESPACE: "file", CATEGORY_NAMESPACE: "subcat"}

ARTICLE_SCHEMA = row_schema("articles")
PASSAGE_SCHEMA = row_schema("passages")
CATEGORY_LINK_SCHEMA = row_schema("category_links")


@dataclass(frozen=True)
class IngestOptions:
    """Parameters of a Wikipedia ingest. All but ``workers`` change the output rows.

    ``chunk_pages`` / ``chunk_chars``: a chunk ends after this many pages or once its wikitext
    reaches this many characters, whichever comes first (keeps chunks of long articles small).
    ``skip_disambiguation``: DPR dropped disambiguation pages; they still get an articles row.
    ``workers``: cleaning processes; 0 or 1 cleans in the calling process.
    """

    words_per_passage: int = 100
    keep_lists: bool = True
    keep_headings: bool = False
    skip_disambiguation: bool = True
    chunk_pages: int = 1000
    chunk_chars: int = 1_000_000
    workers: int = 2

    def __post_init__(self) -> None:
        if self.words_per_passage < 1 or self.chunk_pages < 1 or self.chunk_chars < 1:
            raise ValueError(f"words_per_passage, chunk_pages and chunk_chars must be >= 1: {self}")


@dataclass
class ChunkResult:
    """The rows produced from one chunk of consecutive pages (Arrow tables, without ``source``).

    ``counts``: pages by kind (total, article, redirect, category, file, other, passages).
    ``skipped``: pages whose passages were not produced, by reason (``empty_text``,
    ``invalid_utf8``, ``disambiguation``, ``empty_after_cleaning``, ``clean_error``); every
    page still has its ``articles`` row. ``problems``: one line per page skipped for a defect
    of the input or the cleaner (``invalid_utf8``, ``clean_error``), naming the page.
    """

    index: int
    pages: int
    first_page_id: int | None
    last_page_id: int | None
    articles: pa.Table
    passages: pa.Table
    category_links: pa.Table
    counts: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def process_chunk(pages: list[RawPage], options: IngestOptions, index: int = 0) -> ChunkResult:
    """Turn raw pages into rows; pure and picklable, run in the worker processes."""
    art: dict[str, list] = {name: [] for name in ARTICLE_SCHEMA.names}
    psg: dict[str, list] = {name: [] for name in PASSAGE_SCHEMA.names}
    cat: dict[str, list] = {name: [] for name in CATEGORY_LINK_SCHEMA.names}
    counts: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    problems: list[str] = []
    for page in pages:
        ns, text, redirect_target = page.namespace, page.text, page.redirect_target
        if ns == CATEGORY_NAMESPACE and redirect_target is None and text:
            # English Wikipedia moves categories with {{Category redirect|X}}, not #REDIRECT;
            # recorded as the page's redirect so the domain labeller follows it.
            redirect_target = soft_category_redirect(text)
        is_redirect = redirect_target is not None
        art["article_id"].append(page.page_id)
        art["title"].append(page.title)
        art["namespace"].append(ns)
        art["is_redirect"].append(is_redirect)
        art["redirect_target"].append(redirect_target)
        counts["total"] += 1
        counts[_page_kind(ns, is_redirect)] += 1
        if text is None:
            skipped["empty_text"] += 1
            continue
        if ns in LINK_KIND:
            categories = extract_categories(text)
            if ns == CATEGORY_NAMESPACE and _HIDDEN_CATEGORY.search(text) and HIDDEN_PARENT not in categories:
                categories.append(HIDDEN_PARENT)  # what MediaWiki does for __HIDDENCAT__
            for category in categories:
                cat["page_id"].append(page.page_id)
                cat["title"].append(page.title)
                cat["namespace"].append(ns)
                cat["category"].append(category)
                cat["kind"].append(LINK_KIND[ns])
        if ns != MAIN_NAMESPACE or is_redirect:
            continue
        blocks, reason, problem = _article_passages(page, text, options)
        if problem is not None:
            problems.append(problem)
        if reason is not None:
            skipped[reason] += 1
            continue
        counts["passages"] += len(blocks)
        for position, block in enumerate(blocks):
            psg["passage_id"].append(f"{page.page_id}_{position}")
            psg["article_id"].append(page.page_id)
            psg["title"].append(page.title)
            psg["text"].append(block)
            psg["position"].append(position)
    return ChunkResult(
        index=index,
        pages=len(pages),
        first_page_id=pages[0].page_id if pages else None,
        last_page_id=pages[-1].page_id if pages else None,
        articles=pa.table(art, schema=ARTICLE_SCHEMA),
        passages=pa.table(psg, schema=PASSAGE_SCHEMA),
        category_links=pa.table(cat, schema=CATEGORY_LINK_SCHEMA),
        counts=dict(counts),
        skipped=dict(skipped),
        problems=problems,
    )


CATEGORY_NAMESPACE = 14
HIDDEN_PARENT = "Hidden categories"
_HIDDEN_CATEGORY = re.compile(r"__HIDDENCAT__|\{\{\s*hidden[ _]category\s*[|}]", re.IGNORECASE)


def _page_kind(namespace: int, is_redirect: bool) -> str:
    if is_redirect:
        return "redirect"
    return {MAIN_NAMESPACE: "article", CATEGORY_NAMESPACE: "category", FILE_NAMESPACE: "file"}.get(
        namespace, "other"
    )


def _article_passages(
    page: RawPage, text: str, options: IngestOptions
) -> tuple[list[str], str | None, str | None]:
    """(passages, skip reason or None, problem line or None) of a main-namespace article."""
    where = f"page {page.page_id} {page.title!r} at byte {page.byte_offset}"
    if page.invalid_utf8:
        return [], "invalid_utf8", f"{where}: invalid UTF-8, passages skipped"
    if options.skip_disambiguation and is_disambiguation(text):
        return [], "disambiguation", None
    try:
        cleaned = clean_wikitext(text, keep_lists=options.keep_lists, keep_headings=options.keep_headings)
    except Exception as exc:  # one pathological page must not abort a whole dump: count and name it
        return [], "clean_error", f"{where}: cleaning failed: {exc!r}"
    blocks = split_passages(cleaned, options.words_per_passage)
    return blocks, None if blocks else "empty_after_cleaning", None


def iter_page_chunks(pages: Iterable[RawPage], options: IngestOptions) -> Iterator[tuple[int, list[RawPage]]]:
    """Group pages into ``(chunk index, pages)``; boundaries depend only on pages and options.

    A trailing partial chunk is yielded only when the page stream ends normally: if the reader
    raises (truncated dump), the error propagates and the incomplete chunk is not emitted.
    """
    index = 0
    batch: list[RawPage] = []
    chars = 0
    for page in pages:
        batch.append(page)
        chars += len(page.text) if page.text else 0
        if len(batch) >= options.chunk_pages or chars >= options.chunk_chars:
            yield index, batch
            index += 1
            batch, chars = [], 0
    if batch:
        yield index, batch


def _exit_with(reader_pid: int) -> None:
    """Pool initializer: end this worker once the reader process is gone.

    A worker holds both ends of its task queue, so when the reader is killed (SIGKILL mid-way
    through an ingest) it would wait for work forever; a watchdog thread ends it instead.
    """

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(reader_pid, 0)
            except ProcessLookupError:
                os._exit(1)

    threading.Thread(target=watch, name="reader-watchdog", daemon=True).start()


def _pool_context() -> multiprocessing.context.BaseContext:
    """``fork`` while this process runs no other Python thread, else ``forkserver``.

    Forked workers start at once and share the modules already imported; a spawned or
    fork-server worker first imports pyarrow, mwparserfromhell and the caller's main module
    (seconds on a loaded machine, which would dominate small dumps). Forking while other Python
    threads run (Prefect's do) can deadlock on locks they hold, so then the fork server is
    used: it is started once per process and forks workers from a clean single-threaded state.
    Native pools of numpy/Arrow are not counted: those libraries register fork handlers.
    """
    methods = multiprocessing.get_all_start_methods()
    if threading.active_count() == 1 and "fork" in methods:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def iter_chunks(
    path: Path, options: IngestOptions | None = None, *, start_chunk: int = 0
) -> Iterator[ChunkResult]:
    """Ingest a dump: yield one ``ChunkResult`` per chunk, in dump order.

    ``start_chunk``: chunks before it are read (to find the boundaries) but not processed nor
    yielded, so a killed ingest that wrote chunks ``0..k-1`` resumes with ``start_chunk=k``.
    A ``DumpError`` from the reader is raised after every complete chunk before it was yielded.
    A dump of a single chunk is processed in the calling process (no pool to start).
    """
    options = options or IngestOptions()
    chunks = iter_raw_chunks(path, options, start_chunk=start_chunk)
    head: list[tuple[int, list[RawPage]]] = []
    try:
        for chunk in chunks:
            head.append(chunk)
            if len(head) == 2 or options.workers <= 1:
                break
    except DumpError:
        for index, pages in head:
            yield process_chunk(pages, options, index)
        raise
    if options.workers <= 1 or len(head) < 2:
        for index, pages in itertools.chain(head, chunks):
            yield process_chunk(pages, options, index)
        return
    yield from _pooled(itertools.chain(head, chunks), options)


def iter_raw_chunks(
    path: Path, options: IngestOptions, *, start_chunk: int = 0
) -> Iterator[tuple[int, list[RawPage]]]:
    """The dump's ``(chunk index, raw pages)`` from ``start_chunk`` on, read sequentially.

    Earlier chunks are read (their boundaries fix the later ones) but not yielded. The pages are
    plain data, not handles on the file, so a chunk can be cleaned in another process or on
    another machine.
    """
    return (chunk for chunk in iter_page_chunks(iter_pages(Path(path)), options) if chunk[0] >= start_chunk)


class PendingChunk(Protocol):
    """A submitted chunk: a ``concurrent.futures.Future`` or any future with ``result()``."""

    def result(self) -> ChunkResult: ...


def ordered_results(
    chunks: Iterable[tuple[int, list[RawPage]]],
    submit: Callable[[int, list[RawPage]], PendingChunk],
    max_in_flight: int,
) -> Iterator[ChunkResult]:
    """Submit chunks to an executor and yield their results in chunk order.

    At most ``max_in_flight`` chunks are submitted and not yet yielded, so memory stays flat
    however long the dump is, whatever executes them. A ``DumpError`` from the reader is raised
    after the results of every chunk submitted before it (complete chunks are good output).
    """
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
    pending: deque[PendingChunk] = deque()
    try:
        for index, pages in chunks:
            pending.append(submit(index, pages))
            while len(pending) >= max_in_flight:
                yield pending.popleft().result()
    except DumpError:
        while pending:
            yield pending.popleft().result()
        raise
    while pending:
        yield pending.popleft().result()


def _pooled(chunks: Iterator[tuple[int, list[RawPage]]], options: IngestOptions) -> Iterator[ChunkResult]:
    """Process chunks in a worker pool, at most ``2 * workers`` in flight, results in order."""
    pool = ProcessPoolExecutor(
        options.workers, mp_context=_pool_context(), initializer=_exit_with, initargs=(os.getpid(),)
    )
    try:
        yield from ordered_results(
            chunks,
            lambda index, pages: pool.submit(process_chunk, pages, options, index),
            2 * options.workers,
        )
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
