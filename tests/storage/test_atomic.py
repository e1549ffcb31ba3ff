"""Atomic writes: a file or folder appears complete under its name, or not at all."""

from __future__ import annotations

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
