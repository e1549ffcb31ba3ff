"""Import and export passage corpora (DPR psgs_w100.tsv, BEIR corpus.jsonl)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from prefect import flow, task

from flows.runtime import stage_logger
from pipelines.passage_formats import read_beir_corpus, read_dpr_tsv, write_dpr_tsv
from pipelines.progress import progress
from storage import Workspace
from storage.fingerprint import file_sha256, fingerprint

READERS = {"dpr-tsv": read_dpr_tsv, "beir": read_beir_corpus}


def import_source(fmt: str, path: Path) -> str:
    """The `source` tag of an imported corpus: re-importing the same file replaces its rows."""
    return f"{fmt}:{path.name}"


def import_passages(ws: Workspace, fmt: str, path: Path, stage_fingerprint: str) -> dict[str, Any]:
    source = import_source(fmt, path)
    rows = 0
    with ws.transaction(f"import-passages:{source}", fingerprint=stage_fingerprint) as tx:
        tx.replace_source("passages", source)
        writer = tx.writer("passages", source=source)
        with progress(None, f"import {path.name}", "passages") as bar:
            for batch in READERS[fmt](path):
                table = pa.Table.from_batches([batch])
                writer.write(table.append_column("source", pa.array([source] * table.num_rows, pa.string())))
                rows += batch.num_rows
                bar.update(batch.num_rows)
        writer.close()
        tx.report = {"format": fmt, "path": str(path), "passages": rows}
    return {"format": fmt, "path": str(path), "passages": rows, "source": source}


@task(name="import-passages")
def import_passages_task(workspace: str, fmt: str, path: str, stage_fingerprint: str) -> dict[str, Any]:
    return import_passages(Workspace.resolve(workspace), fmt, Path(path), stage_fingerprint)


@flow(name="import-passages")
def import_passages_flow(fmt: str, path: str, workspace: str | None = None) -> dict[str, Any]:
    """Import a passage corpus (`dpr-tsv` or `beir`) into the passages table."""
    if fmt not in READERS:
        raise ValueError(f"unknown passage format {fmt!r}; expected one of {sorted(READERS)}")
    ws = Workspace.resolve(workspace)
    source_path = Path(path).expanduser().resolve()
    data_file = source_path / "corpus.jsonl" if source_path.is_dir() else source_path
    if not data_file.is_file():
        raise FileNotFoundError(f"passage file not found: {data_file}")
    stage_fp = fingerprint("import-passages", fmt, file_sha256(data_file))
    stage = f"import-passages:{import_source(fmt, source_path)}"
    if ws.stage_is_current(stage, stage_fp):
        stage_logger().info("%s already imported with identical content (no-op)", source_path.name)
        return {"noop": True, **ws.stage_record(stage).report}
    return {"noop": False, **import_passages_task(str(ws.root), fmt, str(source_path), stage_fp)}


@flow(name="export-passages")
def export_passages_flow(out: str, fmt: str = "dpr-tsv", workspace: str | None = None) -> dict[str, Any]:
    """Write the passages table as DPR's psgs_w100.tsv."""
    if fmt != "dpr-tsv":
        raise ValueError(f"unknown export format {fmt!r}; expected 'dpr-tsv'")
    ws = Workspace.resolve(workspace)
    target = Path(out).expanduser().resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    count = write_dpr_tsv(ws.scan("passages", columns=["passage_id", "text", "title"]), target)
    return {"path": str(target), "passages": count}
