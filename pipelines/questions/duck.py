"""DuckDB sessions for out-of-core steps: a memory limit and a spill directory we choose.

PAQ grouping and passage de-duplication handle more rows than fit in memory; DuckDB sorts and
aggregates them within `memory_limit`, spilling to `tmp_dir`, so peak memory is set by the
caller and not by the input size.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import duckdb

_LIMIT = re.compile(r"^\d+(\.\d+)?(KB|MB|GB|TB|KIB|MIB|GIB|TIB)$")


def check_memory_limit(value: str) -> str:
    """A DuckDB memory limit like '1GB' / '512MB' (validated: SET cannot take parameters)."""
    text = value.strip().upper().replace(" ", "")
    if not _LIMIT.match(text):
        raise ValueError(f"memory limit must look like '1GB' or '512MB', got {value!r}")
    return text


def duckdb_session(tmp_dir: Path, memory_limit: str = "1GB", threads: int = 2) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection bounded to `memory_limit`, spilling under `tmp_dir`."""
    con = duckdb.connect()
    con.execute(f"SET memory_limit = '{check_memory_limit(memory_limit)}'")
    con.execute(f"SET threads = {max(1, int(threads))}")
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET temp_directory = ?", [str(Path(tmp_dir) / "duckdb_spill")])
    return con


def sql_string(value: str) -> str:
    """A SQL string literal (quotes doubled), for the few statements DuckDB cannot parameterize."""
    return "'" + str(value).replace("'", "''") + "'"


def duplicate_ids(column: str, new_files: Sequence[Path], kept: Sequence[tuple[Path, str]],
                  limit: int = 3) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:  # fmt: skip
    """Values of `column` that would not be unique after adding `new_files` (Parquet parts) to the
    `kept` parts ((file, source) pairs): (id, times) repeated within the new files and (id, source)
    already held by a kept part, at most `limit` of each. DuckDB groups on disk-backed hash
    tables, so this holds no id set in Python."""
    if not new_files:
        return [], []
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        new = "[" + ", ".join(sql_string(str(p)) for p in new_files) + "]"
        within = con.execute(f'SELECT "{column}", count(*) FROM read_parquet({new}) GROUP BY 1 HAVING count(*) > 1 '
                             f"ORDER BY 1 LIMIT {int(limit)}").fetchall()  # fmt: skip
        across: list[tuple[str, str]] = []
        if kept:
            old = "[" + ", ".join(sql_string(str(path)) for path, _ in kept) + "]"
            rows = con.execute(f'SELECT o."{column}", o.filename FROM read_parquet({old}, filename = true) o '
                               f'SEMI JOIN read_parquet({new}) n USING ("{column}") ORDER BY 1 '
                               f"LIMIT {int(limit)}").fetchall()  # fmt: skip
            source_of = {str(path): source for path, source in kept}
            across = [(row[0], source_of.get(row[1], row[1])) for row in rows]
    finally:
        con.close()
    return [(row[0], row[1]) for row in within], across
