"""`odqa import passages` / `odqa export passages`: passage corpora in DPR psgs_w100.tsv or BEIR format."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from prefect import flow, task

from flows.stages import finished_report
from pipelines.passage_formats import read_beir_corpus, read_dpr_tsv, write_dpr_tsv
from pipelines.progress import progress
from storage import Workspace
from storage.fingerprint import file_sha256, fingerprint
from storage.passages import PASSAGE_COLUMNS
from storage.reports import Report

READERS = {"dpr-tsv": read_dpr_tsv, "beir": read_beir_corpus}


@dataclass
class ImportPassagesReport(Report):
    format: str
    path: str
    passages: int
    source: str


@dataclass
class ExportPassagesReport(Report):
    path: str
    passages: int


def import_source(fmt: str, path: Path) -> str:
    """The `source` tag of an imported corpus: re-importing the same file replaces its rows."""
    return f"{fmt}:{path.name}"


@task(name="import-passages")
def import_passages_task(workspace: str, fmt: str, path: str, stage_fingerprint: str) -> ImportPassagesReport:
    ws = Workspace.resolve(workspace)
    source_path = Path(path)
    source = import_source(fmt, source_path)
    rows = 0
    with ws.transaction(f"import-passages:{source}", fingerprint=stage_fingerprint) as tx:
        tx.replace_source("passages", source)
        writer = tx.writer("passages", source=source)
        with progress(None, f"import {source_path.name}", "passages") as bar:
            for batch in READERS[fmt](source_path):
                table = pa.Table.from_batches([batch])
                writer.write(table.append_column("source", pa.array([source] * table.num_rows, pa.string())))
                rows += batch.num_rows
                bar.update(batch.num_rows)
        writer.close()
        report = ImportPassagesReport(format=fmt, path=str(source_path), passages=rows, source=source)
        tx.report = report.ledger()
    return report


@flow(name="import-passages")
def import_passages_flow(fmt: str, path: str, workspace: str | None = None) -> ImportPassagesReport:
    """Import a passage corpus (`dpr-tsv` or `beir`) into the passages table.

    Args:
        fmt: Format of the corpus: dpr-tsv (id, text, title columns) or beir (a folder with
            corpus.jsonl, or the file itself).
        path: The corpus file or BEIR folder, on the machine the flow runs on; a file imported
            again replaces its earlier rows.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
    """
    if fmt not in READERS:
        raise ValueError(f"unknown passage format {fmt!r}; expected one of {sorted(READERS)}")
    ws = Workspace.resolve(workspace)
    source_path = Path(path).expanduser().resolve()
    data_file = source_path / "corpus.jsonl" if source_path.is_dir() else source_path
    if not data_file.is_file():
        raise FileNotFoundError(f"passage file not found: {data_file}")
    stage_fp = fingerprint("import-passages", fmt, file_sha256(data_file))
    stage = f"import-passages:{import_source(fmt, source_path)}"
    done = finished_report(ws, stage, stage_fp, ImportPassagesReport, f"{source_path.name} already imported with "
                           "identical content")  # fmt: skip
    return done or import_passages_task(str(ws.root), fmt, str(source_path), stage_fp)


@flow(name="export-passages")
def export_passages_flow(out: str, fmt: str = "dpr-tsv", workspace: str | None = None) -> ExportPassagesReport:
    """Write the passages table as DPR's psgs_w100.tsv."""
    if fmt != "dpr-tsv":
        raise ValueError(f"unknown export format {fmt!r}; expected 'dpr-tsv'")
    ws = Workspace.resolve(workspace)
    target = Path(out).expanduser().resolve()
    count = write_dpr_tsv(ws.scan("passages", columns=PASSAGE_COLUMNS), target)
    return ExportPassagesReport(path=str(target), passages=count)
