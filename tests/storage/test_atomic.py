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


_SWAP_THEN_DIE = """
import os, signal, sys, threading, time
from pathlib import Path
from odqa.storage.atomic import building_directory
target = Path(sys.argv[1])
def die_once_swapped():  # SIGKILL as soon as the new folder is in place, while the old one is deleted
    while not (target / "new").is_file():
        time.sleep(0.0005)
    os.kill(os.getpid(), signal.SIGKILL)
threading.Thread(target=die_once_swapped, daemon=True).start()
with building_directory(target) as staging:
    (staging / "new").write_text("new")
time.sleep(60)
"""


def test_what_a_killed_swap_left_is_cleared_by_the_next_build(tmp_path: Path) -> None:
    """Killed while deleting the folder it replaced, a swap leaves that folder half deleted beside
    the new one; the next build of the same target deletes it."""
    target = tmp_path / "export"
    target.mkdir()
    for n in range(20_000):  # an earlier export big enough to take a while to delete
        (target / f"old-{n}").write_bytes(b"")
    repo = Path(__file__).resolve().parents[2]
    killed = subprocess.run([sys.executable, "-c", _SWAP_THEN_DIE, str(target)], cwd=repo,
                            env={**os.environ, "PYTHONPATH": str(repo)}, timeout=120)  # fmt: skip
    assert killed.returncode == -9
    assert (target / "new").read_text() == "new"
    left = [p for p in tmp_path.iterdir() if p != target]
    assert left and all(".old-" in p.name for p in left), left
    with building_directory(target) as staging:
        (staging / "newer").write_text("newer")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"] and os.listdir(target) == ["newer"]


def test_a_swap_killed_between_its_renames_gets_the_earlier_folder_back(tmp_path: Path) -> None:
    """Between its two renames a swap has moved the earlier folder aside and not yet put the new
    one in place: the target is missing. The next build of it (or export to it) puts it back first."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    target = tmp_path / "export"
    aside = tmp_path / f".export.0a1b2c3d.old-{dead.pid}"  # as replace_directory names it
    aside.mkdir()
    (aside / "corpus.jsonl").write_text("earlier\n")
    (tmp_path / f".export.9f8e7d6c.building-{dead.pid}").mkdir()  # the new one, never swapped in
    with building_directory(target) as staging:
        assert (target / "corpus.jsonl").read_text() == "earlier\n"  # back before the new one is built
        (staging / "corpus.jsonl").write_text("new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    assert (target / "corpus.jsonl").read_text() == "new\n"
