"""DPR psgs_w100.tsv and BEIR corpus readers/writers (pure, no workspace)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from odqa.pipelines.passage_formats import PassageFormatError, read_beir_corpus, read_dpr_tsv, write_dpr_tsv
from tests.passages.dpr_sample import DPR_TSV


def _rows(batches) -> list[dict]:
    return pa.Table.from_batches(list(batches)).to_pylist()


def test_dpr_tsv_reads_quoting_and_positions(tmp_path: Path) -> None:
    path = tmp_path / "psgs.tsv"
    path.write_text(DPR_TSV, encoding="utf-8")
    rows = _rows(read_dpr_tsv(path, batch_size=2))
    assert [r["passage_id"] for r in rows] == ["1", "2", "3"]
    assert rows[0]["text"] == 'Aaron Aaron ( or ; "Ahärôn") is a prophet, high priest'
    assert [r["position"] for r in rows] == [0, 1, 0]
    assert rows[2]["title"] == "Zürich"


def test_dpr_tsv_round_trips(tmp_path: Path) -> None:
    src = tmp_path / "psgs.tsv"
    src.write_text(DPR_TSV, encoding="utf-8")
    out = tmp_path / "out.tsv"
    assert write_dpr_tsv(read_dpr_tsv(src), out).passages == 3
    assert _rows(read_dpr_tsv(out)) == _rows(read_dpr_tsv(src))
    assert out.read_text(encoding="utf-8").splitlines()[0] == "id\ttext\ttitle"


def test_a_line_break_in_a_passage_is_exported_as_a_space_and_the_file_reads_back(tmp_path: Path) -> None:
    """BEIR and DPR-JSON passages may hold line breaks; csv quoting would spread such a record over
    several lines, which odqa's own reader refuses: the export writes one passage a line."""
    rows = {
        "passage_id": ["a", "b", "c", "d"],
        "text": ["first line\nsecond line", "windows\r\nline\rold mac", 'tab\tand "quotes" stay', "plain"],
        "title": ["T", "Two\nlines", "Q", None],
    }
    out = tmp_path / "out.tsv"
    written = write_dpr_tsv([pa.RecordBatch.from_pydict(rows)], out)
    assert (written.passages, written.line_breaks_as_spaces) == (4, 2)
    assert len(out.read_bytes().split(b"\n")) == 1 + 4 + 1  # header, a line each, the last line's end
    back = _rows(read_dpr_tsv(out))
    assert [(r["passage_id"], r["text"], r["title"]) for r in back] == [
        ("a", "first line second line", "T"),
        ("b", "windows line old mac", "Two lines"),
        ("c", 'tab\tand "quotes" stay', "Q"),
        ("d", "plain", ""),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ("pid\tbody\tname\n1\tx\ty\n", "expected the header"),
        ("id\ttext\ttitle\n1\tonly two\n", r":2: expected 3 tab-separated fields"),
    ],
)
def test_dpr_tsv_errors_name_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(PassageFormatError, match=message) as info:
        list(read_dpr_tsv(path))
    assert str(path) in str(info.value)


def test_beir_corpus_reads_folder_and_reports_bad_line(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "Bern", "text": "Bern is the federal city.", "metadata": {}}\n'
        '{"_id": 2, "text": "No title here."}\n',
        encoding="utf-8",
    )
    rows = _rows(read_beir_corpus(tmp_path))
    assert [(r["passage_id"], r["title"]) for r in rows] == [("d1", "Bern"), ("2", "")]
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "ok"}\n{"_id": "d2", "text": \n', encoding="utf-8")
    with pytest.raises(PassageFormatError, match=r"corpus.jsonl:2: not valid JSON"):
        list(read_beir_corpus(tmp_path))


@pytest.mark.parametrize(("suffix", "kind"), [(".gz", "gzip"), (".bz2", "bz2")])
def test_compressed_passage_file_is_refused_as_compressed(tmp_path: Path, suffix: str, kind: str) -> None:
    """DPR ships psgs_w100.tsv.gz; read as it is, it was refused as 'not UTF-8 at byte 2', which
    hides that the file only needs decompressing."""
    import bz2
    import gzip

    compress = gzip.compress if kind == "gzip" else bz2.compress
    path = tmp_path / f"psgs_w100.tsv{suffix}"
    path.write_bytes(compress(DPR_TSV.encode("utf-8")))
    for read, target in ((read_dpr_tsv, path), (read_beir_corpus, path)):
        with pytest.raises(PassageFormatError, match=rf"{kind}-compressed file.*decompress it first") as info:
            list(read(target))
        assert str(info.value).startswith(f"{path}: ")


def test_beir_corpus_title_must_be_a_string_or_null(tmp_path: Path) -> None:
    """str() made a list title "['x']" and a title of 0 "" (falsy); null and missing stay ""."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "1", "title": null, "text": "a"}\n{"_id": "2", "text": "b"}\n', encoding="utf-8")
    assert [r["title"] for r in _rows(read_beir_corpus(corpus))] == ["", ""]
    corpus.write_text('{"_id": "1", "title": "T", "text": "a"}\n{"_id": "2", "title": ["x"], "text": "b"}\n',
                      encoding="utf-8")
    with pytest.raises(PassageFormatError, match=r"corpus.jsonl:2: title must be a string \(or null\), got a JSON array"):
        list(read_beir_corpus(corpus))
