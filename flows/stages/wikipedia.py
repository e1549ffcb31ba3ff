"""Ingest a MediaWiki XML dump into articles, passages and category_links.

The stage is keyed on the dump's content hash and the parameters: re-running it on the same file
with the same options is a no-op, and a new dump replaces the previous Wikipedia rows in one
atomic commit. Chunks are staged as they finish, so a killed ingest resumes where it stopped.

Where chunks are cleaned: without a runner, in a local process pool beside the reader (the fastest
on one machine: forked workers, no orchestration per chunk). With `runner` (or a Dask address
in `$ODQA_DASK_ADDRESS`), one Prefect task per chunk mapped over that task runner (threads,
processes or a Dask cluster): the flow still reads the dump and writes the chunks in order as the
same resumable groups, so both paths give the same rows in the same order.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext

from ...pipelines.progress import progress
from ...pipelines.wikipedia.dump_reader import RawPage
from ...pipelines.wikipedia.ingest import (
    ChunkResult,
    IngestOptions,
    iter_chunks,
    iter_raw_chunks,
    ordered_results,
    process_chunk,
)
from ...pipelines.wikipedia.page_diff import DiffCounts, PageHashes, PageHashWriter, PreviousRows, diff_chunks
from ...storage import Workspace
from ...storage.fingerprint import file_sha256, fingerprint
from ...storage.ingest_state import forget_page_hashes, page_hashes_file, page_hashes_meta, record_page_hashes
from ...storage.reports import Report
from ...storage.tables import Transaction, table_dataset
from ..plumbing.bounds import AtLeastOne
from ..plumbing.report_text import log_report
from ..plumbing.skip_unchanged import finished_report
from ..plumbing.task_runners import RunnerSettings, mapping_runner

STAGE = "ingest-wikipedia"
SOURCE = "wikipedia"
TABLES = ("articles", "passages", "category_links")
MAX_PROBLEMS_REPORTED = 20
#: Chunks in flight per worker of the task runner: enough to keep every worker busy while the
#: flow reads the next chunk, few enough that memory stays flat on a dump of any size.
IN_FLIGHT_PER_WORKER = 2

#: `chunks(start_chunk)`: the dump's processed chunks from `start_chunk` on, in chunk order.
ChunkSource = Callable[[int], Iterator[ChunkResult]]


def dump_fingerprint(dump: Path, options: IngestOptions) -> str:
    """Content hash of the dump plus the options that change its output (not `workers`)."""
    params = {k: v for k, v in asdict(options).items() if k != "workers"}
    return fingerprint(STAGE, file_sha256(dump), params)


@dataclass
class IngestReport(Report):
    dump: str
    resumed_chunks: int  # chunks an interrupted earlier attempt had finished: taken over, not redone
    pages: dict[str, int]  # pages read, by kind
    skipped: dict[str, int]  # pages or passages left out, by reason
    rows: dict[str, int] = field(default_factory=dict)  # rows of each table after the ingest
    problems: list[str] = field(default_factory=list)  # defects of the input, one line per page
    cleaned_on: str | None = None
    incremental: bool | None = None  # re-index: only changed pages were cleaned again
    pages_recleaned: int | None = None
    pages_reused: int | None = None
    pages_removed: int | None = None


def ingest_dump(
    ws: Workspace,
    dump: Path,
    options: IngestOptions,
    stage_fingerprint: str,
    chunks: ChunkSource | None = None,
) -> IngestReport:
    """Stream the dump chunk by chunk into one resumable transaction; return the stage report.

    `chunks` processes the chunks (default: `iter_chunks`, the local process pool); whatever
    processes them, they are written here, in chunk order, one resumable group each.
    """
    chunks = chunks or (lambda start: iter_chunks(dump, options, start_chunk=start))
    with ws.transaction(STAGE, fingerprint=stage_fingerprint, resumable=True) as tx:
        report = stage_dump(tx, dump, chunks)
    snapshot = ws.snapshot()
    report.rows = {table: snapshot.rows(table) for table in TABLES}
    return report


def stage_dump(tx: Transaction, dump: Path, chunks: ChunkSource) -> IngestReport:
    """Stage the dump's rows into `tx` (replacing the Wikipedia rows at commit), taking over the
    chunks an interrupted earlier attempt staged; sets and returns the stage report."""
    counts: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    for table in TABLES:
        tx.replace_source(table, SOURCE)
    problems: list[str] = []
    resumed = 0  # chunks an interrupted earlier attempt already staged: taken over, not redone
    while (meta := tx.group_done(_chunk_key(resumed))) is not None:
        counts.update(meta["counts"])
        skipped.update(meta["skipped"])
        resumed += 1
    with progress(None, f"ingest {dump.name}", "pages") as bar:
        for chunk in chunks(resumed):
            tx.write_group(
                _chunk_key(chunk.index),
                {
                    "articles": _with_source(chunk.articles),
                    "passages": _with_source(chunk.passages),
                    "category_links": _with_source(chunk.category_links),
                },
                source=SOURCE,
                meta={"counts": chunk.counts, "skipped": chunk.skipped},
            )
            counts.update(chunk.counts)
            skipped.update(chunk.skipped)
            problems.extend(chunk.problems)
            bar.update(chunk.pages)
    more = [f"... and {len(problems) - MAX_PROBLEMS_REPORTED} more"] if len(problems) > MAX_PROBLEMS_REPORTED else []
    report = IngestReport(dump=str(dump), resumed_chunks=resumed, pages=dict(sorted(counts.items())),
                          skipped=dict(sorted(skipped.items())), problems=problems[:MAX_PROBLEMS_REPORTED] + more)  # fmt: skip
    tx.report = report.ledger()
    return report


def _chunk_key(index: int) -> str:
    return f"chunk-{index:06d}"


def _with_source(rows: Any) -> Any:
    """Tag rows with the table source (lists of dicts or Arrow tables from the pipeline)."""
    import pyarrow as pa

    if isinstance(rows, pa.Table):
        if "source" in rows.column_names:
            rows = rows.drop(["source"])
        return rows.append_column("source", pa.array([SOURCE] * rows.num_rows, pa.string()))
    return [{**row, "source": SOURCE} for row in rows]


@task(name="fingerprint-dump")
def fingerprint_dump_task(dump: str, options: dict[str, Any]) -> str:
    return dump_fingerprint(Path(dump), IngestOptions(**options))


@task(name="ingest-dump-chunks", tags=["cpu-parallel"])
def ingest_dump_task(
    workspace: str, dump: str, options: dict[str, Any], stage_fingerprint: str
) -> IngestReport:
    return ingest_dump(Workspace.resolve(workspace), Path(dump), IngestOptions(**options), stage_fingerprint)


@task(name="clean-wikipedia-chunk", tags=["cpu-parallel"], cache_policy=NO_CACHE, persist_result=False)
def clean_chunk_task(pages: list[RawPage], options: dict[str, Any], index: int) -> ChunkResult:
    """Clean and split one chunk of raw pages wherever the task runner puts it (a thread, a
    process, a Dask worker on another machine): it gets the pages themselves, not the dump."""
    return process_chunk(pages, IngestOptions(**options), index)


def runner_slots(settings: RunnerSettings) -> int:
    """How many chunks the current flow's task runner cleans at once (Dask: its worker threads)."""
    context = FlowRunContext.get()
    client = getattr(context.task_runner, "client", None) if context else None  # DaskTaskRunner
    if client is not None:
        return max(1, sum(client.nthreads().values()))
    return settings.workers or os.cpu_count() or 1


@flow(name="ingest-wikipedia-chunks")
def ingest_chunks_flow(
    workspace: str, dump: str, options: dict[str, Any], stage_fingerprint: str, runner: RunnerSettings
) -> IngestReport:
    """The ingest with one `clean-wikipedia-chunk` task per chunk on this flow's task runner.

    The flow reads the dump (sequential and cheap), keeps a bounded number of chunks in flight
    and writes their results strictly in chunk order, like the local pool does.
    """
    path, opts = Path(dump), IngestOptions(**options)
    in_flight = IN_FLIGHT_PER_WORKER * runner_slots(runner)

    def mapped(start: int) -> Iterator[ChunkResult]:
        raw = iter_raw_chunks(path, opts, start_chunk=start)
        return ordered_results(
            raw, lambda index, pages: clean_chunk_task.submit(pages, options, index), in_flight
        )

    return ingest_dump(Workspace.resolve(workspace), path, opts, stage_fingerprint, chunks=mapped)


@flow(name="ingest-wikipedia")
def ingest_wikipedia_flow(
    dump: str,
    workspace: str | None = None,
    words_per_passage: AtLeastOne = 100,
    keep_lists: bool = True,
    workers: AtLeastOne = 2,
    chunk_pages: AtLeastOne = 1000,
    runner: RunnerSettings | None = None,
) -> IngestReport:
    """Ingest a MediaWiki XML export (.xml / .xml.bz2, multistream too) into the workspace.

    Args:
        dump: Path of the MediaWiki XML export (.xml, .xml.bz2, multistream too); relative paths
            are relative to the repository root, where the worker runs.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        words_per_passage: Words per DPR-style passage (the title is kept apart).
        keep_lists: Keep list items as passage text.
        workers: Processes of the local cleaning pool (used when no runner is given).
        chunk_pages: Pages per chunk, the unit of parallel work and of resumption.
        runner: Clean chunks as tasks on this task runner (threads, processes or a Dask cluster);
            empty: the local process pool (or $ODQA_DASK_ADDRESS's cluster when set).
    """
    ws = Workspace.resolve(workspace)
    path = Path(dump).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"dump not found: {path}")
    options = IngestOptions(
        words_per_passage=words_per_passage, keep_lists=keep_lists, workers=workers, chunk_pages=chunk_pages
    )
    stage_fp = fingerprint_dump_task(str(path), asdict(options))
    done = finished_report(ws, STAGE, stage_fp, IngestReport, f"{path.name}: unchanged dump and options")
    if done is not None:
        return done
    settings = mapping_runner(runner)
    if settings is None:
        report = ingest_dump_task(str(ws.root), str(path), asdict(options), stage_fp)
        report.cleaned_on = f"local process pool (up to {workers} workers)"
    else:
        mapped = ingest_chunks_flow.with_options(task_runner=settings.task_runner())
        report = mapped(str(ws.root), str(path), asdict(options), stage_fp, settings)
        report.cleaned_on = settings.describe()
    log_report(f"ingest wikipedia {path.name}", report)
    return report


# --- incremental ingest (re-index) ----------------------------------------------------------------


def _previous_pages(ws: Workspace, options_fp: str) -> PageHashes | None:
    """The page hashes of the ingest that made the current tables, or None when they do not
    describe them (another ingest ran since, other options, none yet): then every page is cleaned."""
    meta = page_hashes_meta(ws)
    if meta is None or ws.rows("passages") == 0:
        return None
    if meta.get("passages_version") != ws.table_version("passages") or meta.get("options") != options_fp:
        return None
    return PageHashes.read(page_hashes_file(ws))


@dataclass
class StagedDump:
    """A re-index's dump ingest, staged to commit together with the run's other files (or not at
    all); `transaction` is None when the dump is unchanged since its last ingest (a no-op)."""

    report: IngestReport
    transaction: Transaction | None = None
    hashes: PageHashWriter | None = None  # the dump's page hashes, kept for the next re-index
    options_fingerprint: str = ""

    def committed(self, ws: Workspace) -> None:
        """After the run's commit: keep the page hashes as the base of the next incremental ingest."""
        if self.transaction is None or self.hashes is None:
            return
        if self.report.resumed_chunks:  # the hashes miss the chunks an earlier attempt wrote
            self.hashes.abort()
            forget_page_hashes(ws)
        else:
            self.hashes.commit()
            record_page_hashes(ws, {"passages_version": ws.table_version("passages"),
                                    "options": self.options_fingerprint, "dump": self.report.dump})  # fmt: skip
        snapshot = ws.snapshot()
        self.report.rows = {table: snapshot.rows(table) for table in TABLES}

    def aborted(self) -> None:
        """The run commits nothing: drop the page hashes (the staged chunks stay for a resumption)."""
        if self.transaction is not None and self.hashes is not None:
            self.transaction.abort()
            self.hashes.abort()


def stage_dump_incremental(ws: Workspace, dump: Path, words_per_passage: int = 100) -> StagedDump:
    """The Wikipedia ingest stage (same stage, fingerprint and rows as `odqa ingest wikipedia`),
    cleaning only the pages that changed since the previous re-index's dump, staged for the
    caller's commit (`storage.tables.commit_together`); then `committed` or `aborted`."""
    options = IngestOptions(words_per_passage=words_per_passage)
    options_fp = fingerprint({k: v for k, v in asdict(options).items() if k != "workers"})
    stage_fp = dump_fingerprint(dump, options)
    done = finished_report(ws, STAGE, stage_fp, IngestReport, f"{dump.name}: unchanged dump and options")
    if done is not None:
        return StagedDump(done)
    previous = _previous_pages(ws, options_fp)
    old = None
    if previous is not None:
        snapshot = ws.snapshot()
        old = PreviousRows(*(table_dataset(ws.root, snapshot, t) for t in ("articles", "passages", "category_links")))
    counts = DiffCounts()
    writer = PageHashWriter(page_hashes_file(ws))

    def chunks(start: int):
        raw = iter_raw_chunks(dump, options, start_chunk=start)
        return diff_chunks(raw, options, previous or PageHashes.empty(), old, counts, writer if start == 0 else None)

    tx = ws.transaction(STAGE, fingerprint=stage_fp, resumable=True)
    try:
        report = stage_dump(tx, dump, chunks)
    except BaseException:
        tx.abort()
        writer.abort()
        raise
    report.pages_recleaned, report.pages_reused = counts.recleaned, counts.reused
    report.pages_removed = counts.removed(previous) if previous is not None else 0
    report.incremental = previous is not None
    return StagedDump(report, tx, writer, options_fp)
