"""Passage imports are exact: malformed records, duplicate ids and same-named files (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odqa.pipelines.passage_formats import PassageFormatError, read_dpr_tsv
from odqa.storage import Workspace
from tests.boundaries.conftest import workspace_state

HEADER = "id\ttext\ttitle\n"


def _tsv(path: Path, *rows: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"{r}\n" for r in rows), encoding="utf-8")
    return path


def _import(cli, ws: Path, path: Path, *flags: str, ok: bool = True):
    return cli("--workspace", str(ws), "import", "passages", "--format", "dpr-tsv", *flags, str(path), ok=ok)


def _refused(cli, ws: Path, path: Path, *expected: str, flags: tuple[str, ...] = ()) -> str:
    """Import `path`, expecting a refusal whose message holds `expected`; the workspace is unchanged."""
    before = workspace_state(ws)
    result = _import(cli, ws, path, *flags, ok=False)
    assert result.exit_code != 0, result.output
    for text in expected:
        assert text in result.output, result.output
    assert workspace_state(ws) == before
    return result.output


@pytest.fixture
def ws(cli, tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    _import(cli, root, _tsv(tmp_path / "seed" / "passages.tsv", "s1\tseed one\tSeed", "s2\tseed two\tSeed"))
    return root


def test_malformed_records_are_refused_with_file_and_line(cli, ws: Path, tmp_path: Path) -> None:
    stray = _tsv(tmp_path / "stray.tsv", "1\tfine\tA", '2\t"opened never closed\tB', "3\tthree\tC", "4\tfour\tD")
    _refused(cli, ws, stray, f"{stray}:3", "quot")
    fields = _tsv(tmp_path / "fields.tsv", "1\tfine\tA", "2\tno title")
    _refused(cli, ws, fields, f"{fields}:3", "3 tab-separated fields")
    latin = tmp_path / "latin.tsv"
    latin.write_bytes((HEADER + "1\tfine\tA\n2\tZ\xfcrich\tB\n").encode("latin-1"))
    _refused(cli, ws, latin, f"{latin}:3", "not UTF-8 (at byte 4 of the line)")
    long = _tsv(tmp_path / "long.tsv", "1\tfine\tA", "2\t" + "w " * 3000 + "\tB")
    _refused(cli, ws, long, f"{long}:3", "longer than 1,000 bytes", flags=("--max-record-bytes", "1000"))
    empty = tmp_path / "empty.tsv"
    empty.write_bytes(b"")
    _refused(cli, ws, empty, f"{empty}", "empty file")
    _refused(cli, ws, _tsv(tmp_path / "header.tsv"), "no passages")


def test_a_huge_line_is_refused_without_reading_it(tmp_path: Path) -> None:
    """The default limit (1 MiB) is checked while reading: a 64 MiB line is never held whole."""
    path = tmp_path / "huge.tsv"
    with open(path, "wb") as handle:
        handle.write(HEADER.encode() + b"1\t")
        handle.write(b"x" * (64 << 20))
    with pytest.raises(PassageFormatError, match=r"huge.tsv:2: record longer than 1,048,576 bytes"):
        list(read_dpr_tsv(path))


def test_duplicate_ids_are_refused_naming_both_sources(cli, ws: Path, tmp_path: Path) -> None:
    within = _tsv(tmp_path / "within.tsv", "d1\tone\tA", "d2\ttwo\tB", "d1\tagain\tA")
    _refused(cli, ws, within, "'d1' (2 times)", str(within))
    across = _tsv(tmp_path / "across.tsv", "n1\tnew\tN", "s2\tclash\tSeed")
    seed = tmp_path / "seed" / "passages.tsv"
    _refused(cli, ws, across, "'s2'", str(across), f"dpr-tsv:{seed}", "--on-duplicate keep-existing")
    out = _import(cli, ws, across, "--on-duplicate", "keep-existing").output
    assert "passages: 1" in out and "skipped_duplicates: 1" in out and "total: 3" in out
    rows = Workspace.resolve(ws).sql("SELECT passage_id, text FROM passages").to_pylist()
    texts = {r["passage_id"]: r["text"] for r in rows}
    assert texts == {"s1": "seed one", "s2": "seed two", "n1": "new"}


def test_same_name_adds_and_replacing_needs_the_flag(cli, ws: Path, tmp_path: Path) -> None:
    other = _tsv(tmp_path / "other" / "passages.tsv", "o1\tother one\tO")
    out = _import(cli, ws, other).output
    assert "passages: 1" in out and "replaced: 0" in out and "kept: 2" in out and "total: 3" in out
    assert Workspace.resolve(ws).rows("passages") == 3
    _tsv(other, "o1\tchanged\tO", "o2\tsecond\tO")
    _refused(cli, ws, other, "imported before", "--replace")
    out = _import(cli, ws, other, "--replace").output
    assert "passages: 2" in out and "replaced: 1" in out and "kept: 2" in out and "total: 4" in out
    ids = Workspace.resolve(ws).sql("SELECT passage_id FROM passages ORDER BY 1").column("passage_id").to_pylist()
    assert ids == ["o1", "o2", "s1", "s2"]
