"""`odqa import run`: an external run file (TREC format) into the `runs` table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefect import flow

from ...pipelines.retrieval.trec import read_trec_run
from ...storage import Workspace
from ...storage.fingerprint import file_sha256, fingerprint
from ...storage.ids import check_run_name
from ...storage.passages import known_passage_count
from ...storage.questions import questions_with_ids
from ...storage.reports import Report
from ...storage.runs import evaluation_source, run_record_stage, run_source, with_run_name
from ..plumbing.runtime import stage_logger
from ..plumbing.skip_unchanged import finished_report


@dataclass
class ImportRunReport(Report):
    run: str
    retriever: str
    path: str
    rows: int
    questions: int
    questions_unknown: int
    passages_unknown: int = 0  # distinct passage ids of the run the passages table lacks
    # the passages its ids were checked against: evaluation matches answers in their texts, so a
    # later import (a re-cleaned page under the same id) does not change the run's figures
    passages_version: str | None = None


@flow(name="import-run")
def import_run_flow(path: str, run: str, fmt: str = "trec", workspace: str | None = None) -> ImportRunReport:
    """Import an external run file (TREC format) into `runs` under the name RUN."""
    if fmt != "trec":
        raise ValueError(f"unknown run format {fmt!r}; expected 'trec'")
    check_run_name(run)
    ws = Workspace.resolve(workspace)
    source_path = Path(path).expanduser().resolve()
    if not source_path.is_file():
        raise FileNotFoundError(f"run file not found: {source_path}")
    # keyed by the passages too: importing the file again after they changed checks its ids anew
    stage_fp = fingerprint(run_record_stage(run), "import", fmt, file_sha256(source_path), ws.table_version("passages"))
    done = finished_report(ws, run_record_stage(run), stage_fp, ImportRunReport, "same file and passages as before")
    if done is not None:
        return done
    table = read_trec_run(source_path)
    ids = sorted(set(table.column("question_id").to_pylist()))
    known = questions_with_ids(ws, ids, ["question_id"]).num_rows
    passage_ids = set(table.column("passage_id").to_pylist())
    with ws.reading("passages", what=f"import run {run}") as snapshot:  # the count and the version agree
        passages_unknown = len(passage_ids) - known_passage_count(ws, list(passage_ids), snapshot=snapshot)
        passages_version = snapshot.table_version("passages") if snapshot.rows("passages") else None
    with ws.transaction(run_record_stage(run), fingerprint=stage_fp) as tx:
        tx.replace_source("runs", run_source(run))
        tx.replace_source("metrics", evaluation_source(run))
        tx.write("runs", with_run_name(table, run), source=run_source(run))
        report = ImportRunReport(run=run, retriever=f"imported {fmt}", path=str(source_path), rows=table.num_rows,
                                 questions=len(ids), questions_unknown=len(ids) - known,
                                 passages_unknown=passages_unknown, passages_version=passages_version)  # fmt: skip
        tx.report = report.ledger()
    if report.questions_unknown:
        stage_logger().warning("%d question ids of %s are not in the questions table; evaluation ignores them",
                               report.questions_unknown, source_path.name)  # fmt: skip
    if report.passages_unknown:
        stage_logger().warning("%d passage ids of %s are not in the passages table; evaluation by answer match "
                               "counts them as passages without the answer", report.passages_unknown,
                               source_path.name)  # fmt: skip
    return report
