"""`catalog.duckdb`: one DuckDB view per table over the snapshot's Parquet parts.

Users open the catalog with plain `duckdb workspace/catalog.duckdb` and query every table; the
views are rewritten after each commit. Because DuckDB lets only one process write a database
file, a refresh that finds the catalog open elsewhere is skipped with a warning (the snapshot is
the truth) and redone by the next `odqa sql`, which checks the recorded version first.

`odqa sql` itself never reads this file: it queries the same tables in a private, sandboxed
in-memory DuckDB (see `sandboxed_connection`), bounded in time, memory and threads
(`QueryLimits`), so the catalog is only for users' shells.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from .schemas import SCHEMAS, schema_for
from .snapshot import Snapshot
from .table_files import empty_table_file, known_tables, table_paths

CATALOG_FILE = "catalog.duckdb"
DEFAULT_TIMEOUT_S = 60.0
MAX_DEFAULT_MEMORY = 4 * 2**30
# Sizes DuckDB's memory_limit takes: a number and a unit (B, KB, MiB, GB, ...) or a percentage.
_SIZE = re.compile(r"\s*\d+(\.\d+)?\s*([KMGT]i?B|B|%)\s*", re.IGNORECASE)
_STATE_TABLE = "_odqa_catalog_state"
log = logging.getLogger(__name__)

# Statement types `odqa sql` runs; everything else would write or reach outside the catalog.
# This check only gives a clear message early; the sandbox below is what keeps a query in bounds.
READ_ONLY_STATEMENTS = {"SELECT", "EXPLAIN", "PRAGMA", "CALL"}

# DuckDB settings of the private connection `odqa sql` runs in (the names of DuckDB 2.0).
SANDBOX = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_persistent_secrets": False,
}


class ReadOnlyViolation(ValueError):
    """A statement that would change data was given to the read-only SQL entry point."""


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _view_sql(root: Path, snapshot: Snapshot, table: str) -> str:
    # The empty typed file goes first so that every column exists even when older parts were
    # written before a column was added (union_by_name fills them with NULL).
    paths = [empty_table_file(root, table), *table_paths(root, snapshot, table)]
    listed = ", ".join(_quote(p.resolve()) for p in paths)
    return f'CREATE OR REPLACE VIEW "{table}" AS SELECT * FROM read_parquet([{listed}], union_by_name = true)'


def refresh_catalog(root: Path, snapshot: Snapshot, strict: bool = True) -> bool:
    """Rewrite every view for `snapshot`; False when the catalog was busy and `strict` is off."""
    try:
        con = duckdb.connect(str(root / CATALOG_FILE))
    except duckdb.IOException as exc:
        if strict:
            raise RuntimeError(f"{root / CATALOG_FILE} is open in another process: {exc}") from exc
        log.warning("catalog not refreshed (open elsewhere): %s; `odqa sql` will refresh it", exc)
        return False
    try:
        con.execute("BEGIN")
        for table in known_tables(snapshot):
            con.execute(_view_sql(root, snapshot, table))
        con.execute(f"CREATE OR REPLACE TABLE {_STATE_TABLE} (version BIGINT, root VARCHAR)")
        con.execute(f"INSERT INTO {_STATE_TABLE} VALUES (?, ?)", [snapshot.version, str(root.resolve())])
        con.execute("COMMIT")
    finally:
        con.close()
    return True


def catalog_is_current(root: Path, snapshot: Snapshot) -> bool:
    path = root / CATALOG_FILE
    if not path.exists():
        return False
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return False
    try:
        row = con.execute(f"SELECT version, root FROM {_STATE_TABLE}").fetchone()
    except duckdb.Error:
        return False
    finally:
        con.close()
    return row is not None and row[0] == snapshot.version and row[1] == str(root.resolve())


def check_read_only(sql: str) -> None:
    """Refuse anything but one query, naming the offending statement."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.ParserException as exc:
        raise ReadOnlyViolation(f"could not parse the SQL: {exc}") from exc
    if not statements:
        raise ReadOnlyViolation("no SQL statement given")
    for statement in statements:
        kind = statement.type.name
        if kind not in READ_ONLY_STATEMENTS:
            raise ReadOnlyViolation(
                f"`odqa sql` is read-only: {kind} statements are refused "
                f"({statement.query.strip()[:80]!r}). Tables are written by the odqa stages; "
                "to export results use --format csv|json."
            )
    if len(statements) > 1:
        raise ReadOnlyViolation(f"`odqa sql` runs one statement at a time; got {len(statements)} "
                                f"({'; '.join(s.query.strip().rstrip(';')[:40] for s in statements[:3])}): run each on its own, "
                                "or combine them into one query (UNION ALL, a join, WITH ...)")  # fmt: skip


@dataclass(frozen=True)
class QueryLimits:
    """The bounds of one query of `odqa sql` / `ws.sql`, and of the API's DuckDB connections.

    `timeout_s`: wall-clock seconds before the query is interrupted (`connection.interrupt()` from
    a watchdog thread). `memory_limit`: DuckDB's buffer memory (`4GB`, `25%`; None: a quarter of
    the machine's memory, at most 4 GiB); beyond it DuckDB spills to the workspace's `tmp/duckdb`
    and fails only when even that cannot help. `threads`: DuckDB's threads (None: half the cores).
    """

    timeout_s: float | None = DEFAULT_TIMEOUT_S
    memory_limit: str | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"the time limit must be a positive number of seconds, got {self.timeout_s!r}")
        if self.memory_limit is not None and not _SIZE.fullmatch(self.memory_limit):
            raise ValueError(f"memory limit {self.memory_limit!r} is not a size: give a number with a unit, "
                             "e.g. 8GB, 512MB, 4GiB, or a share of the machine's memory, e.g. 50%")  # fmt: skip
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads!r}")

    def settings(self, temp_dir: Path | None) -> dict[str, str | int]:
        return {"memory_limit": self.memory_limit or default_memory_limit(),
                "threads": self.threads or max(1, (os.cpu_count() or 2) // 2),
                "temp_directory": "" if temp_dir is None else str(temp_dir)}  # fmt: skip


def default_memory_limit() -> str:
    """A quarter of the machine's memory, at most 4 GiB (DuckDB's own default is 80 %)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return f"{MAX_DEFAULT_MEMORY // 2**20}MiB"
    return f"{min(physical // 4, MAX_DEFAULT_MEMORY) // 2**20}MiB"


class QueryLimitError(RuntimeError):
    """A query stopped at a bound of `QueryLimits`; the message names the bound and how to raise it."""


def sandboxed_connection(limits: QueryLimits, temp_dir: Path | None) -> duckdb.DuckDBPyConnection:
    """A private in-memory DuckDB that reaches no file (the `SANDBOX` settings), within `limits`,
    its configuration locked so that no statement can switch any of it back.

    Tables are given to it as Arrow data (`register`, `from_arrow`), so DuckDB itself never opens
    a path: `enable_external_access` off then refuses every file function (read_csv, glob, COPY,
    ATTACH, EXPORT, INSTALL, also inside EXPLAIN ANALYZE), and extensions are neither installed
    nor loaded. It spills only into `temp_dir` (whose parent must exist; None: it does not spill)."""
    con = duckdb.connect(":memory:", config={**SANDBOX, **limits.settings(temp_dir)})
    con.execute("SET lock_configuration = true")
    return con


def _register_tables(con: duckdb.DuckDBPyConnection, root: Path, snapshot: Snapshot) -> None:
    """Each table of the snapshot as an Arrow dataset over its Parquet parts.

    No shared file is opened, so concurrent `odqa sql` calls, a refresh by another command, or an
    open `duckdb` shell on catalog.duckdb cannot make the query fail."""
    import pyarrow.dataset as ds

    for table in known_tables(snapshot):
        parts = [str(p) for p in table_paths(root, snapshot, table)]
        if table not in SCHEMAS and not parts:
            continue
        # Older parts may lack a later column: the table's schema fills it with NULL.
        schema = schema_for(table) if table in SCHEMAS else pa.unify_schemas([pq.read_schema(p) for p in parts])
        con.register(table, ds.dataset(parts, schema=schema, format="parquet") if parts else schema.empty_table())


def query_read_only(root: Path, snapshot: Snapshot, sql: str, limits: QueryLimits, temp_dir: Path | None
                    ) -> pa.Table:  # fmt: skip
    """Run one read-only query over the snapshot's tables within `limits`; the result as Arrow."""
    check_read_only(sql)
    _refresh_for_shell(root, snapshot)
    con = sandboxed_connection(limits, temp_dir)
    watchdog = _Watchdog(con, limits.timeout_s)
    try:
        _register_tables(con, root, snapshot)
        with watchdog:
            relation = con.sql(sql)
            return relation.to_arrow_table() if relation is not None else pa.table({})
    except duckdb.InterruptException as exc:
        if not watchdog.fired:
            raise
        raise QueryLimitError(f"the query ran past its time limit of {limits.timeout_s:g} s and was stopped; raise "
                              "the limit with `odqa sql --timeout SECONDS` (`ws.sql(..., timeout_s=...)` in "
                              "Python)") from exc  # fmt: skip
    except duckdb.OutOfMemoryException as exc:
        limit = limits.settings(temp_dir)["memory_limit"]
        raise QueryLimitError(f"the query needs more than its memory limit of {limit} ({str(exc).splitlines()[0]}); "
                              "raise the limit with `odqa sql --memory-limit SIZE`, e.g. 8GB "
                              "(`ws.sql(..., memory_limit=...)` in Python)") from exc  # fmt: skip
    except (duckdb.PermissionException, duckdb.InvalidInputException) as exc:
        if isinstance(exc, duckdb.InvalidInputException) and "configuration" not in str(exc):
            raise
        raise ReadOnlyViolation(f"`odqa sql` reads only the workspace's tables: {exc}") from exc
    finally:
        con.close()


class _Watchdog:
    """Interrupts the connection's running query once `timeout_s` have passed (None: never)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, timeout_s: float | None) -> None:
        self.fired = False
        self._timer = None if timeout_s is None else threading.Timer(timeout_s, self._fire, args=(con,))
        if self._timer is not None:
            self._timer.daemon = True

    def _fire(self, con: duckdb.DuckDBPyConnection) -> None:
        self.fired = True
        with contextlib.suppress(duckdb.Error):  # the query ended (its connection closed) as time ran out
            con.interrupt()

    def __enter__(self) -> _Watchdog:
        if self._timer is not None:
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _refresh_for_shell(root: Path, snapshot: Snapshot) -> None:
    """Bring catalog.duckdb up to date for users' `duckdb` shells, skipping it while it is busy.

    The query itself never reads the catalog file, so a busy or stale catalog costs nothing here.
    """
    try:
        if not catalog_is_current(root, snapshot):
            refresh_catalog(root, snapshot, strict=False)
    except duckdb.Error as exc:
        log.warning("catalog not refreshed (%s); the query does not need it", exc)
