"""What the scheduled re-index finds at its watched source (`flows.compositions.incoming`): the newest dump,
every passages file, and each other entry named with why it is ignored."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odqa.flows.compositions.incoming import look_at


def test_a_folder_yields_the_newest_dump_every_passages_file_and_what_it_ignored(tmp_path: Path) -> None:
    (tmp_path / "enwiki-20260101.xml.bz2").write_bytes(b"old")
    (tmp_path / "enwiki-20260201.xml").write_text("new", encoding="utf-8")
    os.utime(tmp_path / "enwiki-20260101.xml.bz2", (1, 1))
    (tmp_path / "a.tsv").write_text("id\ttext\ttitle\n", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "beir").mkdir()
    (tmp_path / "beir" / "corpus.jsonl").write_text("", encoding="utf-8")
    (tmp_path / ".c.tsv.part").write_text("", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("", encoding="utf-8")
    found = look_at(tmp_path)
    assert found.dump is not None and found.dump.path == tmp_path / "enwiki-20260201.xml"
    assert [(t.path, t.fmt) for t in found.passages] == [(tmp_path / "a.tsv", "dpr-tsv"), (tmp_path / "b.jsonl", "beir"),
                                                         (tmp_path / "beir", "beir")]  # fmt: skip
    assert found.left == {".c.tsv.part": "a hidden or temporary name: rename it when complete"}
    assert found.ignored == {"notes.txt": "not a dump (.xml, .xml.bz2) or passages file (.tsv, .jsonl)",
                             "enwiki-20260101.xml.bz2": "an older dump than enwiki-20260201.xml"}  # fmt: skip
    line = found.describe()
    assert line.startswith(f"looked at {tmp_path}: dump enwiki-20260201.xml, passages a.tsv (dpr-tsv)")


def test_a_file_is_read_as_the_given_format_and_a_missing_source_is_named(tmp_path: Path) -> None:
    delta = tmp_path / "delta.txt"
    delta.write_text("id\ttext\ttitle\n", encoding="utf-8")
    assert [(t.path, t.fmt) for t in look_at(delta, "dpr-tsv").passages] == [(delta, "dpr-tsv")]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert look_at(empty).describe() == f"looked at {empty}: no dump or passages file"
    with pytest.raises(FileNotFoundError, match="gone"):
        look_at(tmp_path / "gone")
