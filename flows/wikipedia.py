"""Ingest a MediaWiki XML dump into articles, passages and category_links.

The stage is keyed on the dump's content hash and the parameters: re-running it on the same file
with the same options is a no-op, and a new dump replaces the previous Wikipedia rows in one
atomic commit. Chunks are staged as they finish, so a killed ingest resumes where it stopped.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import flow, task
from tqdm.auto import tqdm

from flows.runtime import stage_logger
from pipelines.wikipedia.ingest import IngestOptions, iter_chunks
from storage import Workspace
from storage.fingerprint import file_sha256, fingerprint

STAGE = "ingest-wikipedia"
SOURCE = "wikipedia"
TABLES = ("articles", "passages", "category_links")
MAX_PROBLEMS_REPORTED = 20


def dump_fingerprint(dump: Path, options: IngestOptions) -> str:
    """Content hash of the dump plus the options that change its output (not `workers`)."""
    params = {k: v for k, v in asdict(options).items() if k != "workers"}
    return fingerprint(STAGE, file_sha256(dump), params)


def ingest_dump(ws: Workspace, dump: Path, options: IngestOptions, stage_fingerprint: str) -> dict[str, Any]:
    """Stream the dump chunk by chunk into one resumable transaction; return the stage report."""
    counts: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    with ws.transaction(STAGE, fingerprint=stage_fingerprint, resumable=True) as tx:
        for table in TABLES:
            tx.replace_source(table, SOURCE)
        problems: list[str] = []
        resumed = 0  # chunks an interrupted earlier attempt already staged: taken over, not redone
        while (meta := tx.group_done(_chunk_key(resumed))) is not None:
            counts.update(meta["counts"])
            skipped.update(meta["skipped"])
            resumed += 1
        progress = tqdm(desc=f"ingest {dump.name}", unit=" pages", disable=None)
        for chunk in iter_chunks(dump, options, start_chunk=resumed):
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
            progress.update(chunk.pages)
        progress.close()
        report = {
            "dump": str(dump),
            "resumed_chunks": resumed,
            **{f"pages_{k}": v for k, v in sorted(counts.items())},
            **{f"skipped_{k}": v for k, v in sorted(skipped.items())},
        }
        if problems:  # defects of the input, one line per page, so a user can find them
            report["problems"] = problems[:MAX_PROBLEMS_REPORTED] + (
                [f"... and {len(problems) - MAX_PROBLEMS_REPORTED} more"] if len(problems) > MAX_PROBLEMS_REPORTED else []
            )
        tx.report = report
    snapshot = ws.snapshot()
    report.update({f"rows_{t}": snapshot.rows(t) for t in TABLES})
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
def ingest_dump_task(workspace: str, dump: str, options: dict[str, Any], stage_fingerprint: str) -> dict[str, Any]:
    return ingest_dump(Workspace.resolve(workspace), Path(dump), IngestOptions(**options), stage_fingerprint)


@flow(name="ingest-wikipedia")
def ingest_wikipedia_flow(
    dump: str,
    workspace: str | None = None,
    words_per_passage: int = 100,
    keep_lists: bool = True,
    workers: int = 2,
) -> dict[str, Any]:
    """Ingest a MediaWiki XML export (.xml / .xml.bz2, multistream too) into the workspace."""
    log = stage_logger()
    ws = Workspace.resolve(workspace)
    path = Path(dump).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"dump not found: {path}")
    options = IngestOptions(words_per_passage=words_per_passage, keep_lists=keep_lists, workers=workers)
    stage_fp = fingerprint_dump_task(str(path), asdict(options))
    if ws.stage_is_current(STAGE, stage_fp):
        log.info("%s: unchanged dump and options, nothing to do (no-op)", path.name)
        record = ws.stage_record(STAGE)
        return {**(record.report if record else {}), "noop": True}
    report = ingest_dump_task(str(ws.root), str(path), asdict(options), stage_fp)
    log.info("ingested %s: %s", path.name, report)
    return {**report, "noop": False}
