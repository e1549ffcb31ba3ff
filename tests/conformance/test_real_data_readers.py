"""The readers on real files (../shared/data; skipped without it): odqa imports each whole and
reads the records the reference loader reads (README.md: DPR's csv.reader, json.load)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from odqa.pipelines.passage_formats import read_dpr_tsv
from odqa.pipelines.questions.imports import import_questions
from odqa.pipelines.questions.python_literals import literal_eval

from ..conftest import shared_data


def csv_rows(path: Path) -> list[list[str]]:
    """DPR's reading: `csv.reader(open(path), delimiter="\\t")`."""
    with open(path, encoding="utf-8") as handle:
        return list(csv.reader(handle, delimiter="\t"))


def questions(fmt: str, path: Path, **options: str) -> list[tuple[str, list[str]]]:
    table = import_questions(fmt, path, "real", "dev", **options).questions.to_table()
    return list(zip(table["question"].to_pylist(), table["answers"].to_pylist(), strict=True))


def test_squad24_question_files_read_as_csv_reader_reads_them() -> None:
    """squad24's `question<TAB>["answer", ...]` files (raw lines, every one holding quotes): the
    whole file goes in, as csv.reader reads it and, since no field is csv-quoted, as raw lines."""
    for name in ("dev.qas.tsv", "train.qas.tsv"):
        path = shared_data("squad24", name)
        rows = csv_rows(path)
        assert questions("dpr-qas", path) == [(q, list(dict.fromkeys(literal_eval(a)))) for q, a in rows]
        raw = [line.split("\t") for line in path.read_text(encoding="utf-8").removesuffix("\n").split("\n")]
        assert raw == rows and questions("dpr-qas", path, quoting="none") == questions("dpr-qas", path)


def test_squad24_passages_read_as_csv_reader_reads_them() -> None:
    path = shared_data("squad24", "passages.tsv")
    rows = csv_rows(path)
    assert rows[0] == ["id", "text", "title"]
    got = [(r["passage_id"], r["text"], r["title"]) for batch in read_dpr_tsv(path) for r in batch.to_pylist()]
    assert got == [tuple(row) for row in rows[1:]]


def test_real_json_files_read_as_json_load_reads_them() -> None:
    """EntityQuestions' dev files and squad24's DPR training file, against `json.load`."""
    folder = shared_data("entityquestions", "dev")
    loaded = [record for path in sorted(folder.glob("P*.dev.json"))
              for record in json.loads(path.read_text(encoding="utf-8"))]  # fmt: skip
    assert questions("entityquestions", folder) == [(r["question"], list(dict.fromkeys(r["answers"]))) for r in loaded]
    path = shared_data("squad24", "dev.dpr.json")
    samples = json.loads(path.read_text(encoding="utf-8"))
    assert questions("dpr-json", path) == [(s["question"], list(dict.fromkeys(s["answers"]))) for s in samples]
