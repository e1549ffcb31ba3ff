"""`catalog.duckdb`: one DuckDB view per table over the snapshot's Parquet parts.

Users open the catalog with plain `duckdb workspace/catalog.duckdb` and query every table; the
views are rewritten after each commit. Because DuckDB lets only one process write a database
file, a refresh that finds the catalog open elsewhere is skipped with a warning (the snapshot is
the truth) and redone by the next `odqa sql`, which checks the recorded version first.

`odqa sql` itself never reads this file: it queries the same tables in a private, sandboxed
in-memory DuckDB (see `_sandboxed_connection`), so the catalog is only for users' shells.
"""

from __future__ import annotations

import logging
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from .schemas import SCHEMAS, schema_for
from .snapshot import Snapshot
from .table_files import empty_table_file, known_tables, table_paths

CATALOG_FILE = "catalog.duckdb"
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
    """Refuse anything but queries, naming the offending statement."""
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


def _sandboxed_connection(root: Path, snapshot: Snapshot) -> duckdb.DuckDBPyConnection:
    """A private in-memory DuckDB whose only data are the snapshot's tables, and which reaches no file.

    Each table is registered as an Arrow dataset over its Parquet parts, so DuckDB itself never opens
    a path: `enable_external_access` off then refuses every file function (read_csv, glob, COPY,
    ATTACH, EXPORT, INSTALL, also inside EXPLAIN ANALYZE), extensions are neither installed nor
    loaded, and the locked configuration cannot be switched back by the query. No shared file is
    opened, so concurrent `odqa sql` calls, a refresh by another command, or an open `duckdb`
    shell on catalog.duckdb cannot make the query fail.
    """
    import pyarrow.dataset as ds

    con = duckdb.connect(":memory:", config=dict(SANDBOX))
    for table in known_tables(snapshot):
        parts = [str(p) for p in table_paths(root, snapshot, table)]
        if table not in SCHEMAS and not parts:
            continue
        # Older parts may lack a later column: the table's schema fills it with NULL.
        schema = schema_for(table) if table in SCHEMAS else pa.unify_schemas([pq.read_schema(p) for p in parts])
        con.register(table, ds.dataset(parts, schema=schema, format="parquet") if parts else schema.empty_table())
    con.execute("SET lock_configuration = true")
    return con


def query_read_only(root: Path, snapshot: Snapshot, sql: str) -> pa.Table:
    """Run a read-only query over the snapshot's tables and return the result as Arrow."""
    check_read_only(sql)
    _refresh_for_shell(root, snapshot)
    con = _sandboxed_connection(root, snapshot)
    try:
        *leading, last = duckdb.extract_statements(sql)
        for statement in leading:
            con.execute(statement)
        relation = con.sql(last.query)
        return relation.to_arrow_table() if relation is not None else pa.table({})
    except (duckdb.PermissionException, duckdb.InvalidInputException) as exc:
        if isinstance(exc, duckdb.InvalidInputException) and "configuration" not in str(exc):
            raise
        raise ReadOnlyViolation(f"`odqa sql` reads only the workspace's tables: {exc}") from exc
    finally:
        con.close()


def _refresh_for_shell(root: Path, snapshot: Snapshot) -> None:
    """Bring catalog.duckdb up to date for users' `duckdb` shells, skipping it while it is busy.

    The query itself never reads the catalog file, so a busy or stale catalog costs nothing here.
    """
    try:
        if not catalog_is_current(root, snapshot):
            refresh_catalog(root, snapshot, strict=False)
    except duckdb.Error as exc:
        log.warning("catalog not refreshed (%s); the query does not need it", exc)
