"""odqa's `dpr-qas` and `dpr-tsv` readers read what DPR's loaders read.

DPR reads both with `csv.reader(open(path), delimiter="\\t")` (README.md); the fixture holds
tricky files and the records that reader gave for them. odqa must give the same records, except
where DPR loses or merges data silently or stops (the DEPARTURES, each stated in docs/interop.md):
there odqa refuses naming file and line, or reads what DPR cannot.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from odqa.pipelines.passage_formats import PassageFormatError, read_dpr_tsv
from odqa.pipelines.questions.imports import ImportFormatError, import_questions
from odqa.pipelines.questions.python_literals import literal_eval
from odqa.pipelines.questions.rows import stable_id, unique_in_order

from .conftest import reference_figures

FIGURES = reference_figures("dpr_tsv_loaders.json")
QAS, PASSAGES = FIGURES["dpr-qas"], FIGURES["dpr-tsv"]


class Refused:
    """odqa refuses the file at `line`; `hidden` (the refused line's text) never shows in the message."""

    def __init__(self, line: int, hidden: str, hint: bool = False) -> None:
        self.line, self.hidden, self.hint = line, hidden, hint


def _without_bom(records: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    first = {**records[0], key: records[0][key].removeprefix("\ufeff")}
    return [first, *records[1:]]


def _qas(case: dict[str, Any]) -> list[dict[str, Any]]:
    """CsvQASrc's records of the rows that have any field (DPR stops at an empty row)."""
    return [{"question": r[0], "answers": literal_eval(r[1]), "id": None} for r in case["rows"] if r]


# odqa's record where DPR's differs: why, in docs/interop.md's table.
QAS_DEPARTURES: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]] | Refused]] = {
    # answers are kept once each, in their order (DPR's has_answer is an any-match)
    "repeated answers": lambda c: [{**r, "answers": unique_in_order(r["answers"])} for r in c["records"]],
    # a byte order mark is the file's, not the first question's
    "byte order mark": lambda c: _without_bom(c["records"], "question"),
    # empty lines are skipped; DPR stops at them (IndexError)
    "empty lines": _qas,
    # answers are read as JSON first: \/ is /, a surrogate pair one character (DPR's eval keeps a
    # backslash and two unpaired surrogates, which no UTF-8 writer takes)
    "json escapes python reads otherwise": lambda c: [{"question": "q1", "answers": ["AC/DC"], "id": None},
                                                       {"question": "q2", "answers": ["\U0001f600"], "id": None}],  # fmt: skip
    "unpaired surrogate": lambda c: Refused(2, "Queequeg"),
    "quote left open merges the next lines": lambda c: Refused(2, "Moby Dick", hint=True),
    "carriage return inside a line": lambda c: Refused(2, "Ishmael"),
}
PASSAGE_DEPARTURES: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]] | Refused]] = {
    # the header is skipped whatever starts it; DPR reads "\ufeffid" as a passage id
    "byte order mark": lambda c: c["records"][1:],
    "empty line": lambda c: Refused(3, "Pequod"),  # DPR stops at it (IndexError)
    # an unquoted tab shifts the columns: DPR keeps the first three
    "four fields": lambda c: Refused(2, "extra"),
    "quote left open merges the next lines": lambda c: Refused(2, "Pequod", hint=True),
    "carriage return inside a line": lambda c: Refused(2, "Starbuck"),
}


def write_case(folder: Path, content: str, name: str) -> Path:
    path = folder / name
    path.write_bytes(content.encode("utf-8"))
    return path


def odqa_questions(path: Path, **options: Any) -> list[dict[str, Any]]:
    table = import_questions("dpr-qas", path, "conf", "dev", **options).questions.to_table()
    return [{"question": q, "answers": a, "question_id": i}
            for q, a, i in zip(*(table[c].to_pylist() for c in ("question", "answers", "question_id")), strict=True)]  # fmt: skip


def odqa_passages(path: Path, **options: Any) -> list[dict[str, Any]]:
    return [{"id": row["passage_id"], "text": row["text"], "title": row["title"]}
            for batch in read_dpr_tsv(path, **options) for row in batch.to_pylist()]  # fmt: skip


def expected(case: dict[str, Any], departures: dict[str, Callable[..., Any]], name: str) -> Any:
    if name in departures:
        return departures[name](case)
    assert "error" not in case, f"DPR stops on {name!r} ({case['error']}): it needs a departure"
    return case["records"]


def check_refusal(error: pytest.ExceptionInfo[Exception], path: Path, refused: Refused) -> None:
    message = str(error.value)
    assert message.startswith(f"{path}:{refused.line}: "), message
    assert refused.hidden not in message.replace(str(path), ""), f"the refusal quotes the line: {message}"
    if refused.hint:
        assert "--quoting none" in message


def test_the_motivating_line_reads_as_csv_reader_reads_it(tmp_path: Path) -> None:
    """`"An Account of Further Discoveries in Air" was published by who in 1775?<TAB>[...]`: one
    record, the quotes taken as csv quoting (they close mid-field; the rest follows unquoted)."""
    path = write_case(tmp_path, QAS["leading quoted title"]["content"], "dev.qas.tsv")
    got = odqa_questions(path)
    assert got[0]["question"] == "An Account of Further Discoveries in Air was published by who in 1775?"
    assert got[0]["answers"] == ["Joseph Priestley"]
    assert len(got) == 2


@pytest.mark.parametrize("name", list(QAS))
def test_dpr_qas_reads_what_dprs_csv_reader_reads(tmp_path: Path, name: str) -> None:
    case = QAS[name]
    path = write_case(tmp_path, case["content"], "case.qas.tsv")
    want = expected(case, QAS_DEPARTURES, name)
    if isinstance(want, Refused):
        with pytest.raises(ImportFormatError) as error:
            odqa_questions(path)
        check_refusal(error, path, want)
        return
    got = odqa_questions(path)
    assert [{"question": r["question"], "answers": r["answers"]} for r in got] == [
        {"question": r["question"], "answers": r["answers"]} for r in want
    ]
    for record, row in zip(want, got, strict=True):
        if record["id"] is not None:
            assert row["question_id"] == stable_id("conf", "dev", record["id"])


@pytest.mark.parametrize("name", list(PASSAGES))
def test_dpr_tsv_reads_what_dprs_csv_reader_reads(tmp_path: Path, name: str) -> None:
    case = PASSAGES[name]
    path = write_case(tmp_path, case["content"], "case.tsv")
    want = expected(case, PASSAGE_DEPARTURES, name)
    if isinstance(want, Refused):
        with pytest.raises(PassageFormatError) as error:
            odqa_passages(path)
        check_refusal(error, path, want)
        return
    assert odqa_passages(path) == want


def test_quoting_none_reads_raw_lines(tmp_path: Path) -> None:
    """`--quoting none`: each line split at tabs, quotes are text; a quote left open merges nothing."""
    titled = write_case(tmp_path, QAS["leading quoted title"]["content"], "titled.qas.tsv")
    assert odqa_questions(titled, quoting="none")[0]["question"] == (
        '"An Account of Further Discoveries in Air" was published by who in 1775?'
    )
    opened = write_case(tmp_path, QAS["quote left open merges the next lines"]["content"], "open.qas.tsv")
    assert [r["question"] for r in odqa_questions(opened, quoting="none")] == [
        "q1", '"Moby Dick opens a quote', 'q3"', "q4"
    ]
    passages = write_case(tmp_path, PASSAGES["leading quoted title"]["content"], "titled.tsv")
    assert odqa_passages(passages, quoting="none") == [
        {"id": "1", "text": '"Dune" is a novel by Frank Herbert.', "title": "Dune (novel)"},
        {"id": "2", "text": "plain text", "title": '"Emma"'},
    ]
