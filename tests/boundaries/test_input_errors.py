"""Errors a user can act on (issue 41, point 8): deeply nested JSON, a UTF-8 byte order mark and a
full disk are reported naming the file, the position and the limit, never as Python's bare
"maximum recursion depth exceeded", "expected a JSON array" or "[Errno 28]". (Over-long model ids:
tests/boundaries/test_id_rules.py.)
"""

from __future__ import annotations

import builtins
import errno
import json
import os
from pathlib import Path

import pytest

from odqa.pipelines.passage_formats import PassageFormatError, read_beir_corpus
from odqa.pipelines.questions.imports import ImportFormatError, import_questions
from odqa.storage import Workspace, atomic
from tests.boundaries.conftest import workspace_state
from tests.models.filled_workspace import fill_workspace

DEEP = "[" * 100_000 + "]" * 100_000
BOM = b"\xef\xbb\xbf"


def _questions(fmt: str, path: Path) -> None:
    list(import_questions(fmt, path, "nq", "dev").questions)


def test_deeply_nested_json_names_the_file_the_record_and_the_limit(tmp_path: Path) -> None:
    for fmt, name, content, position in [
        ("dpr-json", "train.json", '[{"question": "q?", "answers": ["a"]}, ' + DEEP + "]", ": element 1 at offset 39"),
        ("nq-open", "dev.jsonl", '{"question": "q?", "answer": ["a"]}\n' + DEEP + "\n", ":2"),
        ("squad", "squad.json", '{"data": ' + DEEP + "}", ""),
        ("dpr-qas", "test.qa.csv", "q?\t" + DEEP + "\n", ":1"),
    ]:  # fmt: skip
        path = tmp_path / name
        path.write_text(content)
        with pytest.raises(ImportFormatError, match=rf"{path}{position}: nested deeper than the JSON reader follows "
                                                    r"\(about [\d,]+ levels"):  # fmt: skip
            _questions(fmt, path)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "x"}\n' + DEEP + "\n")
    with pytest.raises(PassageFormatError, match=rf"{corpus}:2: nested deeper"):
        list(read_beir_corpus(corpus))


def test_a_byte_order_mark_is_refused_saying_so(tmp_path: Path) -> None:
    """DPR's and BEIR's own loaders (json.load of the UTF-8 text) refuse a BOM, and so does odqa."""
    records = [{"question": "q?", "answers": ["a"]}]
    array = tmp_path / "train.json"
    array.write_bytes(BOM + json.dumps(records).encode())
    with pytest.raises(ValueError, match="Unexpected UTF-8 BOM"):
        json.load(open(array, encoding="utf-8"))  # noqa: SIM115 (the reference loader)
    with pytest.raises(ImportFormatError, match=rf"{array}: starts with a UTF-8 byte order mark \(BOM, bytes EF BB BF\)"):
        _questions("dpr-json", array)
    lines = tmp_path / "dev.jsonl"
    lines.write_bytes(BOM + b'{"question": "q?", "answer": ["a"]}\n')
    with pytest.raises(ImportFormatError, match=rf"{lines}: starts with a UTF-8 byte order mark"):
        _questions("nq-open", lines)
    squad = tmp_path / "squad.json"
    squad.write_bytes(BOM + b'{"data": []}')
    with pytest.raises(ImportFormatError, match=rf"{squad}: starts with a UTF-8 byte order mark"):
        _questions("squad", squad)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(BOM + b'{"_id": "d1", "text": "x"}\n')
    with pytest.raises(PassageFormatError, match=rf"{corpus}: starts with a UTF-8 byte order mark"):
        list(read_beir_corpus(corpus))


class _FullDisk:
    """`open` for the atomic writers whose files take `room` bytes, then fail as a full disk does."""

    def __init__(self, room: int) -> None:
        self.room = room

    def __call__(self, path, mode="r", *args, **kwargs):
        handle = builtins.open(path, mode, *args, **kwargs)  # noqa: SIM115 (the caller closes it, as with open)
        if "w" not in mode:
            return handle
        write, disk = handle.write, self

        def limited(data):
            if len(data) > disk.room:
                raise OSError(errno.ENOSPC, "No space left on device")
            disk.room -= len(data)
            return write(data)

        handle.write = limited
        return handle


def test_a_full_disk_names_the_file_being_written(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    fill_workspace(root)
    ws = Workspace.resolve(root)
    monkeypatch.setattr(atomic, "open", _FullDisk(room=100), raising=False)
    before = workspace_state(root)
    named = (r"/staging/.*/passages/part-000000\.parquet: no space left on the device while writing it "
             r"\([\d,.]+ \w+ free of [\d,.]+ \w+ on its file system\)")  # fmt: skip
    with pytest.raises(OSError, match=named) as full, ws.transaction("more") as tx:
        tx.write("passages", [{"passage_id": "p-new", "title": "T", "text": "t", "position": 0}], source="more")
    assert full.value.errno == errno.ENOSPC
    assert workspace_state(root) == before  # nothing half-written became visible


def test_a_full_disk_during_an_import_or_export_is_named_on_the_command_line(cli, monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:  # fmt: skip
    root = tmp_path / "ws"
    fill_workspace(root)
    tsv = tmp_path / "passages.tsv"
    tsv.write_text("id\ttext\ttitle\nnew-1\tsome text\tT\n", encoding="utf-8")
    monkeypatch.setattr(atomic, "open", _FullDisk(room=100), raising=False)
    result = cli("--workspace", str(root), "import", "passages", "--format", "dpr-tsv", str(tsv), ok=False)
    assert "odqa: error: " in result.output and "part-000000.parquet: no space left on the device" in result.output
    out = tmp_path / "psgs.tsv"
    result = cli("--workspace", str(root), "export", "passages", str(out), ok=False)
    assert f"odqa: error: {out}: no space left on the device while writing it" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["passages.tsv", "ws"]


def test_a_path_that_is_not_utf8_is_refused_naming_it_escaped(cli, tmp_path: Path) -> None:
    """A Latin-1 file name reaches Python as surrogates, which no log, table or flow run parameter
    holds: the verb refuses the argument, shown escaped, before any work, not with a codec error."""
    root = tmp_path / "ws"
    fill_workspace(root)
    latin1 = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.tsv"))
    latin1.write_text("id\ttext\ttitle\nnew-1\tsome text\tT\n", encoding="utf-8")
    before = workspace_state(root)
    for args in (("import", "passages", "--format", "dpr-tsv", str(latin1)), ("reindex", "--passages", str(latin1))):
        result = cli("--workspace", str(root), *args, ok=False)
        assert result.exit_code == 2, result.output
        assert f"{tmp_path}/caf\\xe9.tsv is not UTF-8 (shown escaped)" in result.output, result.output
    assert workspace_state(root) == before
