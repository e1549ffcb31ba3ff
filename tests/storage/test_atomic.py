"""Atomic writes: a file or folder appears complete under its name, or not at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odqa.storage.atomic import (
    atomic_file,
    atomic_text_file,
    atomic_write_json,
    building_directory,
    replace_directory,
    slug,
    write_parquet_atomic,
)


def test_a_failed_write_leaves_the_old_content_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out" / "data.txt"
    with atomic_text_file(target) as handle:
        handle.write("old")
    with pytest.raises(RuntimeError, match="boom"), atomic_file(target) as raw:
        raw.write(b"half of the new conte")
        raise RuntimeError("boom")
    assert target.read_text(encoding="utf-8") == "old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["data.txt"]


def test_streamed_parquet_and_json(tmp_path: Path) -> None:
    table = pa.table({"a": [1, 2, 3]})
    write_parquet_atomic(table, tmp_path / "t.parquet")
    assert pq.read_table(tmp_path / "t.parquet").equals(table)
    atomic_write_json(tmp_path / "v.json", {"b": 1, "a": [2]})
    assert (tmp_path / "v.json").read_text(encoding="utf-8") == '{\n  "a": [\n    2\n  ],\n  "b": 1\n}\n'


def test_a_folder_is_built_aside_and_swapped_in_whole(tmp_path: Path) -> None:
    target = tmp_path / "index"
    with building_directory(target) as staging:
        (staging / "part").write_text("one", encoding="utf-8")
        assert not target.exists()
    assert (target / "part").read_text(encoding="utf-8") == "one"
    with pytest.raises(RuntimeError), building_directory(target) as staging:
        (staging / "part").write_text("two, half done", encoding="utf-8")
        raise RuntimeError("killed")
    assert (target / "part").read_text(encoding="utf-8") == "one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]
    replacement = tmp_path / "new"
    replacement.mkdir()
    (replacement / "part").write_text("three", encoding="utf-8")
    replace_directory(replacement, target)
    assert (target / "part").read_text(encoding="utf-8") == "three" and not replacement.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_slug_keeps_names_file_safe() -> None:
    assert slug("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers_all-MiniLM-L6-v2"
    assert slug("///", "model") == "model"


def test_a_build_never_removes_a_live_builders_folder(tmp_path: Path) -> None:
    """Two builds of one target: the second clears only folders whose builder is dead."""
    target = tmp_path / "index"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        running = tmp_path / f".index.abcd1234.building-{live.pid}"
        killed = tmp_path / f".index.ef567890.building-{dead.pid}"
        legacy = tmp_path / ".index.0a1b2c3d.building"  # an older build's folder, no pid
        for folder in (running, killed, legacy):
            folder.mkdir()
        with building_directory(target) as staging:
            assert staging.name.endswith(f".building-{os.getpid()}")
            (staging / "part").write_text("mine", encoding="utf-8")
        assert running.is_dir() and not killed.exists() and not legacy.exists()
        assert (target / "part").read_text(encoding="utf-8") == "mine"
    finally:
        live.kill()
        live.wait()
