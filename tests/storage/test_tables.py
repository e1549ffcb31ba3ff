"""Transactions: atomic visibility, source replacement, resumable staging, garbage collection."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odqa.storage import Workspace
from odqa.storage.schemas import conform


def _passages(ids: list[str], title: str = "T") -> list[dict]:
    return [{"passage_id": i, "article_id": 1, "title": title, "text": f"text {i}", "position": n} for n, i in enumerate(ids)]


def test_resolve_prefers_argument_then_env_then_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ODQA_WORKSPACE", str(tmp_path / "from-env"))
    assert Workspace.resolve(str(tmp_path / "arg")).root == tmp_path / "arg"
    assert Workspace.resolve(None).root == tmp_path / "from-env"
    monkeypatch.delenv("ODQA_WORKSPACE")
    assert Workspace.resolve(None).root == tmp_path / "workspace"


def test_empty_tables_have_typed_columns(workspace: Workspace) -> None:
    table = workspace.read_table("questions")
    assert table.num_rows == 0
    assert table.schema.field("answers").type == pa.list_(pa.string())


def test_commit_makes_all_tables_visible_together(workspace: Workspace) -> None:
    tx = workspace.transaction("s", fingerprint="f1")
    tx.write("passages", _passages(["a", "b"]), source="src")
    tx.write("articles", [{"article_id": 1, "title": "T", "namespace": 0, "is_redirect": False}], source="src")
    assert workspace.rows("passages") == 0 and workspace.rows("articles") == 0  # staged, not visible
    tx.commit()
    assert workspace.rows("passages") == 2 and workspace.rows("articles") == 1
    assert workspace.stage_is_current("s", "f1") and not workspace.stage_is_current("s", "f2")


def test_failed_transaction_leaves_previous_state(workspace: Workspace) -> None:
    with workspace.transaction("s") as tx:
        tx.write("passages", _passages(["a"]), source="src")
    with pytest.raises(RuntimeError), workspace.transaction("s") as tx:
        tx.replace_source("passages", "src")
        tx.write("passages", _passages(["x", "y", "z"]), source="src")
        raise RuntimeError("boom")
    assert workspace.read_table("passages").column("passage_id").to_pylist() == ["a"]
    assert not list((workspace.root / "staging").glob("*"))


def test_replace_source_keeps_other_sources(workspace: Workspace) -> None:
    with workspace.transaction("one") as tx:
        tx.write("passages", _passages(["a1", "a2"]), source="A")
        tx.write("passages", _passages(["b1"]), source="B")
    with workspace.transaction("two") as tx:
        tx.replace_source("passages", "A")
        tx.write("passages", _passages(["a3"]), source="A")
    assert sorted(workspace.read_table("passages").column("passage_id").to_pylist()) == ["a3", "b1"]


def test_part_writer_rolls_parts_and_keeps_order(workspace: Workspace) -> None:
    ids = [f"p{i:03d}" for i in range(25)]
    with workspace.transaction("s") as tx:
        writer = tx.writer("passages", source="src", rows_per_part=10)
        for start in range(0, 25, 7):
            writer.write(_passages(ids[start : start + 7]))
        writer.close()
    assert [e.rows for e in workspace.snapshot().files("passages")] == [10, 10, 5]
    assert workspace.read_table("passages").column("passage_id").to_pylist() == ids
    scanned = [pid for b in workspace.scan("passages", ["passage_id"], batch_size=4) for pid in b.column(0).to_pylist()]
    assert scanned == ids


def test_resumable_transaction_adopts_finished_groups(workspace: Workspace) -> None:
    tx = workspace.transaction("ingest", fingerprint="fp", resumable=True)
    tx.write_group("chunk-000000", {"passages": _passages(["a"])}, source="w", meta={"pages": 3})
    tx.abort()  # a crash: nothing visible, staging kept
    assert workspace.rows("passages") == 0
    again = workspace.transaction("ingest", fingerprint="fp", resumable=True)
    assert again.group_done("chunk-000000") == {"pages": 3}
    assert again.group_done("chunk-000001") is None
    again.write_group("chunk-000001", {"passages": _passages(["b"])}, source="w")
    again.commit()
    assert workspace.read_table("passages").column("passage_id").to_pylist() == ["a", "b"]
    other = workspace.transaction("ingest", fingerprint="other", resumable=True)
    assert other.group_done("chunk-000000") is None  # other inputs never adopt stale parts


def test_old_files_are_collected_after_replacement(workspace: Workspace) -> None:
    for round_ in range(6):
        with workspace.transaction("s") as tx:
            tx.replace_table("passages")
            tx.write("passages", _passages([f"r{round_}"]), source="src")
    files = list((workspace.root / "tables" / "passages").glob("*.parquet"))
    assert len(files) <= 3  # the last KEEP_SNAPSHOTS versions only
    assert workspace.read_table("passages").column("passage_id").to_pylist() == ["r5"]


def test_conform_rejects_unknown_columns() -> None:
    with pytest.raises(ValueError, match="no column"):
        conform(pa.table({"passage_id": ["a"], "bogus": [1]}), "passages")


def test_killed_writer_never_exposes_a_partial_part(tmp_path: Path) -> None:
    """SIGKILL a process while it writes parts; every file a reader can see is complete."""
    root = tmp_path / "ws"
    script = textwrap.dedent(
        f"""
        import os, signal
        from odqa.storage import Workspace
        ws = Workspace.resolve({str(root)!r})
        rows = [{{"passage_id": str(i), "title": "t", "text": "x " * 200, "position": i}} for i in range(20000)]
        with ws.transaction("s", fingerprint="f") as tx:
            for part in range(50):
                tx.write("passages", rows, source="src", part=f"p{{part}}")
                if part == 3:
                    os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == -9
    ws = Workspace.resolve(root)
    assert ws.rows("passages") == 0 and ws.read_table("passages").num_rows == 0
    for path in root.rglob("*.parquet"):  # staged files are complete Parquet files or temp names
        if not path.name.startswith("."):
            assert pq.ParquetFile(path).metadata.num_rows >= 0  # raises on a truncated file
    assert os.path.exists(root)


def test_rewrite_updates_parts_in_place_and_detects_conflicts(workspace: Workspace) -> None:
    import pyarrow.compute as pc

    from odqa.storage.tables import ConcurrentUpdateError

    with workspace.transaction("a") as tx:
        tx.write("passages", _passages(["a1", "a2"]), source="A")
        tx.write("passages", _passages(["b1"]), source="B")

    def upper(table: pa.Table) -> pa.Table:
        return table.set_column(table.schema.get_field_index("text"), "text", pc.utf8_upper(table["text"]))

    with workspace.transaction("rewrite") as tx:
        assert tx.rewrite("passages", upper, select=lambda e: e.source == "A") == 1
    rows = {r["passage_id"]: r["text"] for r in workspace.read_table("passages").to_pylist()}
    assert rows == {"a1": "TEXT A1", "a2": "TEXT A2", "b1": "text b1"}
    with workspace.transaction("rewrite") as tx:  # a later re-import of source A still replaces it
        tx.replace_source("passages", "A")
    assert workspace.rows("passages") == 1

    slow = workspace.transaction("slow")
    slow.rewrite("passages", upper)
    with workspace.transaction("other") as tx:
        tx.replace_table("passages")
    with pytest.raises(ConcurrentUpdateError, match="run the stage again"):
        slow.commit()
