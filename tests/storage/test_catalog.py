"""The DuckDB catalog: a view per table, refreshed on commit, read-only SQL."""

from __future__ import annotations

import duckdb
import pytest

from odqa.storage import Workspace
from odqa.storage.catalog import ReadOnlyViolation, check_read_only


def test_views_follow_commits(workspace: Workspace) -> None:
    assert workspace.sql("SELECT count(*) AS n FROM articles").column("n").to_pylist() == [0]
    with workspace.transaction("s") as tx:
        tx.write("articles", [{"article_id": 7, "title": "Zürich", "namespace": 0, "is_redirect": False}], source="x")
    con = duckdb.connect(str(workspace.catalog_path), read_only=True)
    try:
        assert con.execute("SELECT title FROM articles").fetchall() == [("Zürich",)]
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    finally:
        con.close()
    assert {"articles", "passages", "category_links", "domains", "questions", "runs", "metrics", "models"} <= tables


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM articles",
        "INSERT INTO metrics VALUES (1)",
        "CREATE TABLE t AS SELECT 1",
        "COPY (SELECT 1) TO '/tmp/out.csv'",
        "ATTACH ':memory:' AS other",
        "SELECT 1; DROP VIEW articles",
    ],
)
def test_writes_are_refused(sql: str) -> None:
    with pytest.raises(ReadOnlyViolation, match="read-only"):
        check_read_only(sql)


@pytest.mark.parametrize("sql", ["SELECT 1", "WITH a AS (SELECT 1) SELECT * FROM a", "DESCRIBE articles", "SHOW TABLES"])
def test_queries_are_allowed(sql: str) -> None:
    check_read_only(sql)


def test_stale_catalog_is_refreshed_by_sql(workspace: Workspace) -> None:
    with workspace.transaction("s") as tx:
        tx.write("articles", [{"article_id": 1, "title": "A", "namespace": 0, "is_redirect": False}], source="x")
    holder = duckdb.connect(str(workspace.catalog_path))  # a user's shell keeps the catalog open
    try:
        with workspace.transaction("s2") as tx:  # refresh is skipped, commit still succeeds
            tx.write("articles", [{"article_id": 2, "title": "B", "namespace": 0, "is_redirect": False}], source="y")
    finally:
        holder.close()
    assert workspace.sql("SELECT count(*) AS n FROM articles").column("n").to_pylist() == [2]


def test_commits_from_threads_of_one_process_keep_the_catalog_current(workspace: Workspace) -> None:
    """Threads committing at once (a thread or in-process Dask runner's tasks) neither fail on a
    DuckDB write-write conflict of the catalog's views nor leave an older snapshot's views last."""
    from concurrent.futures import ThreadPoolExecutor

    from odqa.storage.catalog import catalog_is_current

    def commit(i: int) -> None:
        with workspace.transaction(f"thread-{i}") as tx:
            tx.write("articles", [{"article_id": i, "title": f"t{i}", "namespace": 0, "is_redirect": False}],
                     source=f"s{i}")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(commit, range(24)))
    assert catalog_is_current(workspace.root, workspace.snapshot())
    con = duckdb.connect(str(workspace.catalog_path), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM articles").fetchone() == (24,)
    finally:
        con.close()
