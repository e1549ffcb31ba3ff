"""`odqa sql` answers queries over the workspace's tables and reaches nothing else (issue 28)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from odqa.storage import Workspace
from odqa.storage.catalog import ReadOnlyViolation
from tests.boundaries.conftest import table_counts, workspace_state

REPO_ROOT = Path(__file__).resolve().parents[2]

ESCAPES = [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT count(*) FROM glob('/root/**')",
    "SELECT * FROM read_parquet('https://example.com/x.parquet')",
    "EXPLAIN ANALYZE SELECT * FROM read_csv('/etc/hostname')",
    "PRAGMA enable_profiling",
]


@pytest.mark.parametrize("sql", ESCAPES)
def test_files_outside_the_tables_are_unreachable(filled: Workspace, sql: str) -> None:
    before = workspace_state(filled.root)
    with pytest.raises(ReadOnlyViolation, match="only the workspace's tables"):
        filled.sql(sql)
    assert workspace_state(filled.root) == before


@pytest.mark.parametrize("target", ["snapshot.json", "tables/x.parquet", "../outside.json"])
def test_explain_analyze_cannot_write(filled: Workspace, target: str) -> None:
    before, counts = workspace_state(filled.root), table_counts(filled)
    with pytest.raises(ReadOnlyViolation):
        filled.sql(f"EXPLAIN ANALYZE COPY (SELECT 'x' AS a) TO '{filled.root / target}'")
    assert not (filled.root / target).resolve().exists() or target == "snapshot.json"
    assert workspace_state(filled.root) == before and table_counts(filled) == counts
    assert filled.sql("SELECT count(*) AS n FROM passages").column("n").to_pylist() == [2]


def test_no_extension_is_installed(filled: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(ReadOnlyViolation):
        filled.sql("SELECT * FROM read_json('s3://bucket/x.json')")
    assert not (tmp_path / "home" / ".duckdb").exists()


def test_queries_still_answer(filled: Workspace) -> None:
    assert filled.sql("SELECT passage_id FROM passages ORDER BY 1").column("passage_id").to_pylist() == ["p1", "p2"]
    assert filled.sql("EXPLAIN ANALYZE SELECT count(*) FROM articles").num_rows == 1
    tables = filled.sql("SHOW TABLES").column("name").to_pylist()
    assert {"articles", "passages", "questions", "metrics"} <= set(tables)


def _odqa_sql(root: Path, query: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(REPO_ROOT / ".venv" / "bin" / "odqa"), "--workspace", str(root), "sql", "--format", "csv", query],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
    )


def test_sql_while_the_catalog_is_held_and_refreshed(filled: Workspace) -> None:
    """A `duckdb` shell holds catalog.duckdb open for writing, a commit leaves the catalog stale,
    and three `odqa sql` run at once: every one answers from the current snapshot."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('held', flush=True); "
         "sys.stdin.read()", str(filled.catalog_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with filled.transaction("more") as tx:  # its catalog refresh is skipped: the shell holds the file
            tx.write("passages", [{"passage_id": "p3", "title": "T3", "text": "text 3", "position": 0}], source="more")
        runs = [_odqa_sql(filled.root, "SELECT count(*) AS n FROM passages") for _ in range(3)]
        outputs = [run.communicate(timeout=120) for run in runs]
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    for run, (out, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err
        assert out.split() == ["n", "3"]
