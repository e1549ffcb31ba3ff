"""DuckDB sessions for out-of-core steps: a memory limit and a spill directory we choose.

PAQ grouping and passage de-duplication handle more rows than fit in memory; DuckDB sorts and
aggregates them within `memory_limit`, spilling to `tmp_dir`, so peak memory is set by the
caller and not by the input size.
"""

from __future__ import annotations

import re
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
