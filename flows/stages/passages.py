"""`odqa import passages` / `odqa export passages`: passage corpora in DPR psgs_w100.tsv or BEIR format."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
from prefect import flow, task

from ...pipelines.import_heads import passage_data_file, passage_reader
from ...pipelines.passage_formats import MAX_RECORD_BYTES, PassageFormatError, write_dpr_tsv
from ...pipelines.progress import progress
from ...pipelines.tsv_lines import quoting_fingerprint
from ...storage import Workspace
from ...storage.choices import ON_DUPLICATE, OnDuplicate, PassageFormat, Quoting
from ...storage.fingerprint import file_sha256, fingerprint
from ...storage.locks import writer_lock
from ...storage.passages import PASSAGE_COLUMNS, duplicate_passage_ids
from ...storage.reports import Report
from ...storage.tables import Transaction, entries_after
from ...storage.write_targets import check_file_target, export_file
from ..plumbing.bounds import AtLeastOne
from ..plumbing.report_text import log_report
from ..plumbing.skip_unchanged import finished_report


@dataclass
class ImportPassagesReport(Report):
    """What an import did to the passages table: rows added, replaced (this source's old rows),
    kept (other sources' rows), skipped (duplicates under --on-duplicate keep-existing), total."""

    passages: int
    source: str  # the format and the file's full path
    replaced: int = 0
    kept: int = 0
    skipped_duplicates: int = 0
    total: int = 0

    def as_figures(self) -> dict[str, Any]:
        """The figures, without `skipped_duplicates` when no row was skipped (the usual case)."""
        figures = super().as_figures()
        if not self.skipped_duplicates:
            figures.pop("skipped_duplicates", None)
        return figures


@dataclass
class ExportPassagesReport(Report):
    path: str
    passages: int
    line_breaks_as_spaces: int = 0  # passages whose text or title had a line break, written as a space

    def as_figures(self) -> dict[str, Any]:
        """The figures, without `line_breaks_as_spaces` when 0 (the usual case: DPR's and Wikipedia's
        passages are one line each)."""
        figures = super().as_figures()
        if not self.line_breaks_as_spaces:
            figures.pop("line_breaks_as_spaces", None)
        return figures


def passages_stage(fmt: str, path: Path) -> str:
    """The ledger name of importing this passage file (the pipeline checks it is still there)."""
    return f"import-passages:{import_source(fmt, path)}"


@contextmanager
def passages_import_lock(ws: Workspace, purpose: str, wait_s: float = 0.0) -> Iterator[None]:
    """One writer of imported passages at a time (`odqa import passages`, a re-index's files): the
    duplicate check must see every commit before its own. A second one waits `wait_s` (a re-index,
    for an import it meets), else is refused naming the first."""
    with writer_lock(ws.root, "table:passages:import", f"the passages table ({purpose})", wait_s=wait_s):
        yield


def import_source(fmt: str, path: Path) -> str:
    """The `source` tag of an imported corpus: its format and full path, so that two files of the
    same name are two sources (re-importing one path replaces its rows only with --replace)."""
    return f"{fmt}:{path.expanduser().resolve()}"


def _existing_ids(ws: Workspace, source: str) -> pa.Array:
    """passage_ids of every other source, for --on-duplicate keep-existing."""
    table = ws.read_table("passages", columns=["passage_id"], filter=pc.field("source") != source)
    return table.column("passage_id").combine_chunks()


def _refuse_duplicates(ws: Workspace, tx: Transaction, run: Sequence[Transaction], source_path: Path,
                       name_ids: bool) -> None:  # fmt: skip
    """Refuse this file when its passage ids repeat within it or clash with the rows the table
    holds after `run` (the transactions committed together with `tx`). `name_ids`: quote the ids
    (`odqa import passages`, for a file its user chose); else the message names the other
    sources only, never a value read from the file (the watched folder)."""
    kept = entries_after(run, "passages", leaving_out=tx)
    within, across = duplicate_passage_ids(tx.staged_files("passages"), kept, ws.root)
    if within:
        listed = ": " + ", ".join(f"{pid!r} ({n} times)" for pid, n in within) if name_ids else ""
        raise PassageFormatError(f"{source_path}: duplicate passage ids within the file{listed}; ids must be unique")
    if across:
        listed = (", ".join(f"{pid!r} (from {other})" for pid, other in across) if name_ids else
                  "ids held by " + ", ".join(sorted({other for _, other in across})))  # fmt: skip
        raise PassageFormatError(
            f"{source_path}: passage ids already in the workspace from another source: {listed}. Ids must be "
            "unique across the workspace; pass --on-duplicate keep-existing to skip such rows of this file"
        )


def stage_passages(ws: Workspace, tx: Transaction, fmt: str, source_path: Path, *, run: Sequence[Transaction] = (),
                   opened: BinaryIO | None = None, on_duplicate: str = "refuse",
                   max_record_bytes: int = MAX_RECORD_BYTES, name_ids: bool = True,
                   quoting: Quoting = "csv") -> ImportPassagesReport:  # fmt: skip
    """Stage one passages file into `tx` (replacing its source's earlier rows at commit) and set
    the stage's report; refuses (`PassageFormatError`) a malformed file or ids that clash with
    the table as it will be once `run` (the transactions committing together, `tx` among them)
    is committed. `opened`: the file already open, `source_path` naming it. `quoting`: how a
    dpr-tsv line is split (`pipelines.tsv_lines`)."""
    source = import_source(fmt, source_path)
    read = passage_reader(fmt, quoting)
    rows = skipped = 0
    existing = _existing_ids(ws, source) if on_duplicate == "keep-existing" else None
    tx.replace_source("passages", source)
    writer = tx.writer("passages", source=source)
    with progress(None, f"import {source_path.name}", "passages") as bar:
        for batch in read(source_path, max_record_bytes=max_record_bytes, opened=opened):
            table = pa.Table.from_batches([batch])
            if existing is not None:
                table = table.filter(pc.invert(pc.is_in(table.column("passage_id"), value_set=existing)))
                skipped += batch.num_rows - table.num_rows
            writer.write(table.append_column("source", pa.array([source] * table.num_rows, pa.string())))
            rows += table.num_rows
            bar.update(batch.num_rows)
    writer.close()
    _refuse_duplicates(ws, tx, run or [tx], source_path, name_ids)
    files = ws.snapshot().files("passages")
    replaced = sum(e.rows for e in files if e.source == source)
    kept = sum(e.rows for e in entries_after(run or [tx], "passages", leaving_out=tx))
    report = ImportPassagesReport(passages=rows, source=source, replaced=replaced, kept=kept,
                                  skipped_duplicates=skipped, total=kept + rows)  # fmt: skip
    tx.report = report.ledger()
    return report


@task(name="import-passages")
def import_passages_task(workspace: str, fmt: str, path: str, stage_fingerprint: str, on_duplicate: str = "refuse",
                         max_record_bytes: int = MAX_RECORD_BYTES, quoting: Quoting = "csv") -> ImportPassagesReport:  # fmt: skip
    ws = Workspace.resolve(workspace)
    source_path = Path(path)
    with ws.transaction(passages_stage(fmt, source_path), fingerprint=stage_fingerprint) as tx:
        return stage_passages(ws, tx, fmt, source_path, on_duplicate=on_duplicate, max_record_bytes=max_record_bytes,
                              quoting=quoting)  # fmt: skip


def imported_before(ws: Workspace, fmt: str, source_path: Path, stage_fingerprint: str) -> ImportPassagesReport | None:
    """The recorded report when this file was imported with this content (a no-op), else None."""
    return finished_report(ws, passages_stage(fmt, source_path), stage_fingerprint, ImportPassagesReport,
                           f"{source_path} already imported with identical content")  # fmt: skip


def passages_fingerprint(fmt: str, sha256: str, on_duplicate: str = "refuse", quoting: Quoting = "csv") -> str:
    """The import stage's fingerprint: the format, the file's content hash, the duplicate rule and
    the quoting (`quoting_fingerprint`)."""
    return fingerprint("import-passages", fmt, sha256, on_duplicate, *quoting_fingerprint(quoting))


def held_rows(ws: Workspace, fmt: str, source_path: Path) -> int:
    """Rows an earlier import of this file (format and path) holds in the passages table."""
    source = import_source(fmt, source_path)
    return sum(e.rows for e in ws.snapshot().files("passages") if e.source == source)


@flow(name="import-passages")
def import_passages_flow(fmt: PassageFormat, path: str, workspace: str | None = None, replace: bool = False,
                         on_duplicate: OnDuplicate = "refuse", max_record_bytes: AtLeastOne = MAX_RECORD_BYTES,
                         quoting: Quoting = "csv") -> ImportPassagesReport:  # fmt: skip
    """Import a passage corpus (`dpr-tsv` or `beir`) into the passages table.

    A file is a source of its own (format + full path): another file adds to the table, the same
    file with new content replaces its rows only when `replace` is set, and passage ids stay
    unique across the workspace (`on_duplicate`: refuse, or keep the rows already there).

    Args:
        fmt: Format of the corpus: dpr-tsv (id, text, title columns) or beir (a folder with
            corpus.jsonl, or the file itself).
        path: The corpus file or BEIR folder, on the machine the flow runs on. Another file adds
            to the passages table; the same file with new content needs `replace`.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        replace: Replace the rows an earlier import of this same file (path) brought in.
        on_duplicate: A passage id the workspace already holds: refuse (the default, naming both
            sources) or keep-existing (keep the row already there and count the skipped one).
        max_record_bytes: The longest record (line) accepted; a longer one is refused with its
            file and line.
        quoting: How a dpr-tsv line is split: csv (the default) reads it as DPR's csv.reader does
            (a field that starts with a quote is csv-quoted); none splits it at tabs only, quotes
            being text (a file that was not written with csv quoting).
    """
    passage_reader(fmt, quoting)  # refuses an unknown format or quoting before any work
    if on_duplicate not in ON_DUPLICATE:
        raise ValueError(f"unknown --on-duplicate {on_duplicate!r}; expected one of {list(ON_DUPLICATE)}")
    ws = Workspace.resolve(workspace)
    source_path = Path(path).expanduser().resolve()
    data_file = passage_data_file(source_path, fmt)
    source = import_source(fmt, source_path)
    # One passages import at a time: the duplicate check must see every commit before its own.
    with passages_import_lock(ws, f"import of {source_path}"):
        stage_fp = passages_fingerprint(fmt, file_sha256(data_file), on_duplicate, quoting)
        report = imported_before(ws, fmt, source_path, stage_fp)
        if report is None:
            held = held_rows(ws, fmt, source_path)
            if held and not replace:
                raise FileExistsError(
                    f"{source_path} was imported before with other content or options ({held:,} passages of source "
                    f"{source}); pass --replace to replace them with this file's passages"
                )
            report = import_passages_task(str(ws.root), fmt, str(source_path), stage_fp, on_duplicate,
                                          max_record_bytes, quoting)  # fmt: skip
    log_report(f"import passages {source_path.name}", report)
    return report


@flow(name="export-passages")
def export_passages_flow(out: str, fmt: str = "dpr-tsv", force: bool = False,
                         workspace: str | None = None) -> ExportPassagesReport:  # fmt: skip
    """Write the passages table as DPR's psgs_w100.tsv at `out`: a new file, or with `force` a
    file replaced (never one in the workspace's own folders; `storage.write_targets`)."""
    if fmt != "dpr-tsv":
        raise ValueError(f"unknown export format {fmt!r}; expected 'dpr-tsv'")
    ws = Workspace.resolve(workspace)
    target = check_file_target(out, ws.root, option="OUT", force=force)
    with export_file(target, ws.root, option="OUT", force=force) as staged:
        written = write_dpr_tsv(ws.scan("passages", columns=PASSAGE_COLUMNS), staged)
    return ExportPassagesReport(path=str(target), passages=written.passages,
                                line_breaks_as_spaces=written.line_breaks_as_spaces)  # fmt: skip
