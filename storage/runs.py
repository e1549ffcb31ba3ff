"""Retrieval runs in the `runs` table: their names, table sources and stage records.

A run's rows carry the table source `run:<name>`, so re-running or re-importing a run replaces
its rows in one commit, and the metrics computed from the old rows (source `evaluate:<name>`)
are dropped in the same commit. The stage record `run:<name>` keeps how the run was made (its
retriever and parameters), shown beside its metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from .workspace import Workspace

RUN_COLUMNS = ["question_id", "passage_id", "rank", "score"]


def run_source(run: str) -> str:
    """Table source of a run's rows in `runs`."""
    return f"run:{run}"


def evaluation_source(run: str) -> str:
    """Table source of a run's rows in `metrics` (dropped whenever the run is replaced)."""
    return f"evaluate:{run}"


def run_record_stage(run: str) -> str:
    """Stage name whose ledger record keeps how a run was made."""
    return f"run:{run}"


@dataclass(frozen=True)
class RunOrigin:
    """Which passages a run's ids name, and how odqa got the run."""

    passages_version: str | None  # None: unknown (a run imported before imports recorded it)
    imported: bool  # read from a run file (`odqa import run`), not retrieved by odqa


def run_origin(ws: Workspace, run: str) -> RunOrigin:
    """The passages version a run's ids name, from its stage record: the version a retrieved run
    was searched in, or the one an imported run's ids were checked against when it was imported.
    Runs retrieved before the record named it carry it in their searcher's config."""
    record = ws.stage_record(run_record_stage(run))
    report = record.report if record else {}
    imported = str(report.get("retriever", "")).startswith("imported")
    if report.get("passages_version"):
        return RunOrigin(str(report["passages_version"]), imported)
    config = report.get("config") or {}
    found = config.get("index_corpus") or config.get("index_snapshot")  # dense (and hybrid) / BM25
    return RunOrigin(str(found) if found else None, imported)


def known_runs(ws: Workspace) -> list[str]:
    if not ws.rows("runs"):
        return []
    return sorted(set(ws.read_table("runs", columns=["run"]).column("run").to_pylist()))


def read_run(ws: Workspace, run: str) -> pa.Table:
    """A run's rows (question_id, passage_id, rank, score); an unknown run is an error listing
    the known ones."""
    table = ws.read_table("runs", columns=RUN_COLUMNS, filter=pc.field("run") == run)
    if table.num_rows == 0:
        raise ValueError(f"no run named {run!r}; known runs: {', '.join(known_runs(ws)) or 'none'}")
    return table


def with_run_name(table: pa.Table | pa.RecordBatch, run: str) -> pa.Table:
    """Run rows with their `run` column, ready for the `runs` table."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    return table.append_column("run", pa.array([run] * table.num_rows, pa.string()))
