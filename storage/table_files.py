"""Where a table's Parquet parts live under the workspace, and the typed empty file of each table.

Both the transactions that write parts (`storage.tables`) and the DuckDB views that read them
(`storage.catalog`) need this layout; keeping it here lets each of them import it without
importing the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from .atomic import write_parquet_atomic
from .schemas import SCHEMAS, schema_for
from .snapshot import Snapshot

TABLES_DIR = "tables"
EMPTY_DIR = "_empty"


def empty_table_file(root: Path, table: str) -> Path:
    """A zero-row Parquet file with the table's schema, so empty tables keep typed columns."""
    path = root / TABLES_DIR / EMPTY_DIR / f"{table}.parquet"
    schema = schema_for(table)
    if path.exists() and pq.read_schema(path).equals(schema):
        return path
    write_parquet_atomic(schema.empty_table(), path)
    return path


def table_paths(root: Path, snapshot: Snapshot, table: str) -> list[Path]:
    return [root / entry.path for entry in snapshot.files(table)]


def known_tables(snapshot: Snapshot) -> Iterable[str]:
    return sorted(set(SCHEMAS) | set(snapshot.tables))


@dataclass(frozen=True)
class FileSpan:
    """The rows ``[offset, offset + rows)`` of the table file at ``position`` in the file list."""

    position: int
    offset: int
    rows: int


def file_spans(file_rows: Sequence[int], start: int, stop: int) -> list[FileSpan]:
    """The parts of consecutive table files (``file_rows`` rows each) that ordinals ``[start, stop)`` cover."""
    if not 0 <= start <= stop <= sum(file_rows):
        raise ValueError(f"rows {start}..{stop} are outside a table of {sum(file_rows)} rows")
    spans = []
    first = 0
    for position, rows in enumerate(file_rows):
        last = first + rows
        lo, hi = max(start, first), min(stop, last)
        if lo < hi:
            spans.append(FileSpan(position, lo - first, hi - lo))
        first = last
    return spans
