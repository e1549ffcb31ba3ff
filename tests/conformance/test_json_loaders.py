"""odqa's JSON question readers read what the datasets' own loaders read.

`dpr-json`, `entityquestions` and `squad` files are read with `json.load`, `nq-open` files with
`json.loads` per line (README.md). The fixture holds tricky files and the records those loaders
gave; odqa must give the same, except where a loader reads something no UTF-8 table can hold or
stops (the DEPARTURES, each stated in docs/interop.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from odqa.pipelines.questions.imports import ImportFormatError, import_questions
from odqa.pipelines.questions.rows import stable_id, unique_in_order

from .conftest import reference_figures

FIGURES = reference_figures("json_loaders.json")
FORMATS = ("dpr-json", "entityquestions", "squad", "nq-open")
FILE_NAMES = {"dpr-json": "train.json", "entityquestions": "P19.dev.json", "squad": "dev.json", "nq-open": "dev.jsonl"}


class Refused:
    """odqa refuses the file, naming it and `where` (a line, an element or an offset)."""

    def __init__(self, where: str) -> None:
        self.where = where


def _squad_titles(case: dict[str, Any]) -> list[dict[str, Any]]:
    """SQuAD's titles name Wikipedia pages (Super_Bowl_50); odqa's passage title is the page's title."""
    return [{**r, "title": r["title"].replace("_", " ")} for r in case["records"]]


def _nq_lines(case: dict[str, Any]) -> list[dict[str, Any]]:
    """Each non-blank line as one record (the loader stops at a blank line, or where its text-mode
    file ends a line at a carriage return between two tokens)."""
    return [json.loads(line) for line in case["content"].split("\n") if line.strip()]


# odqa's reading where the loader's differs: why, in docs/interop.md's table.
DEPARTURES: dict[str, dict[str, Callable[[dict[str, Any]], Any]]] = {
    "dpr-json": {"unpaired surrogate": lambda c: Refused(": element 1 at offset "),
                 "data after the array": lambda c: Refused(": offset ")},  # fmt: skip
    "entityquestions": {"unpaired surrogate": lambda c: Refused(": element 1 at offset "),
                        "data after the array": lambda c: Refused(": offset ")},  # fmt: skip
    "squad": {"unpaired surrogate": lambda c: Refused(": data[0].paragraphs[0].qas[1]"),
              **{name: _squad_titles for name in ("quotes, non-ascii, nfd and zero-width", "ascii escapes",
                                                  "crlf and no final newline")}},  # fmt: skip
    "nq-open": {"unpaired surrogate": lambda c: Refused(":2: "), "empty lines": _nq_lines,
                "carriage return between tokens": _nq_lines},  # fmt: skip
}
CASES = [(fmt, name) for fmt in FORMATS for name in FIGURES[fmt]]


def odqa_records(fmt: str, path: Path) -> list[dict[str, Any]]:
    """odqa's import of `path` in the shape of the fixture's records."""
    imported = import_questions(fmt, path, "conf", "dev")
    questions = imported.questions.to_table().to_pylist()
    passages = {p["passage_id"]: p for p in imported.passages.to_table().to_pylist()} if imported.passages else {}
    if fmt == "dpr-json":
        return [{"question": q["question"], "answers": q["answers"],
                 "positive_ctxs": [[pid, passages[pid]["title"], passages[pid]["text"]] for pid in q["positive_ids"]]}
                for q in questions]  # fmt: skip
    if fmt == "squad":
        return [{"id": q["question_id"], "question": q["question"], "answers": q["answers"],
                 "context": passages[q["positive_ids"][0]]["text"], "title": passages[q["positive_ids"][0]]["title"]}
                for q in questions]  # fmt: skip
    key = "answer" if fmt == "nq-open" else "answers"
    return [{"question": q["question"], key: q["answers"]} for q in questions]


def in_odqa_terms(fmt: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The loader's records as odqa keeps them: answers once each, SQuAD's ids hashed with the split."""
    key = "answer" if fmt == "nq-open" else "answers"
    kept = [{**r, key: unique_in_order(r[key])} for r in records]
    if fmt == "squad":
        kept = [{**r, "id": stable_id("conf", "dev", r["id"])} for r in kept]
    return kept


@pytest.mark.parametrize(("fmt", "name"), CASES, ids=[f"{f}: {n}" for f, n in CASES])
def test_odqa_reads_what_the_json_loader_reads(tmp_path: Path, fmt: str, name: str) -> None:
    case = FIGURES[fmt][name]
    path = tmp_path / FILE_NAMES[fmt]
    path.write_bytes(case["content"].encode("utf-8"))
    departure = DEPARTURES[fmt].get(name)
    want = departure(case) if departure else None
    if isinstance(want, Refused) or (want is None and "error" in case):
        # where the loader stops (a BOM, a second document), odqa refuses too, naming the file
        with pytest.raises(ImportFormatError) as error:
            odqa_records(fmt, path)
        message = str(error.value)
        assert message.startswith(str(path)), message
        if isinstance(want, Refused):
            assert message.startswith(f"{path}{want.where}"), message
            assert "Queequeg" not in message
        return
    assert odqa_records(fmt, path) == in_odqa_terms(fmt, want if want is not None else case["records"])
