"""The Python API's DuckDB connections have `ws.sql`'s sandbox (issue 41): `ws.duckdb(name)` handed
back a relation whose connection read /etc/passwd and wrote files."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import odqa
from odqa.storage import Workspace

ESCAPES = [
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_csv('/etc/hostname')",
    "SET memory_limit = '100GB'",
]


@pytest.mark.parametrize("escape", ESCAPES)
def test_a_relation_of_the_api_reaches_no_file(filled: Workspace, escape: str) -> None:
    relation = odqa.open_workspace(filled.root).duckdb("passages")
    with pytest.raises((duckdb.PermissionException, duckdb.InvalidInputException)):
        relation.query("passages", escape).fetchall()


def test_a_relation_of_the_api_writes_no_file(filled: Workspace, tmp_path: Path) -> None:
    ws = odqa.open_workspace(filled.root)
    target = tmp_path / "out.csv"
    with pytest.raises(duckdb.PermissionException):
        ws.duckdb("passages").query("passages", f"COPY passages TO '{target}'").fetchall()
    assert not target.exists()


def test_the_api_connection_joins_tables_in_the_sandbox(filled: Workspace) -> None:
    ws = odqa.open_workspace(filled.root)
    connection = ws.connection(memory_limit="256MB")
    passages, articles = ws.duckdb("passages", connection).set_alias("p"), ws.duckdb("articles", connection)
    joined = passages.join(articles.set_alias("a"), "p.title = a.title").count("*").fetchall()
    assert joined == [(2,)]
    with pytest.raises(duckdb.PermissionException):
        connection.sql("SELECT * FROM read_text('/etc/passwd')").fetchall()
    assert connection.sql("SELECT current_setting('memory_limit')").fetchall()[0][0].startswith("244")  # 256 MB
