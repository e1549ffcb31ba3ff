"""odqa's BEIR readers read what BEIR's `GenericDataLoader` reads.

BEIR reads corpus.jsonl and queries.jsonl with `json.loads` per line and qrels/<split>.tsv with
`csv.reader(..., delimiter="\\t")` after skipping its header line (README.md). The fixture holds
tricky BEIR folders and what the loader gave for them. `odqa import questions --format beir`
(questions, qrels, passages) and `odqa import passages --format beir` (the corpus) must give the
same, except where the loader drops, merges or stops (the DEPARTURES, stated in docs/interop.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from odqa.pipelines.passage_formats import PassageFormatError, read_beir_corpus
from odqa.pipelines.questions.imports import ImportFormatError, import_questions
from odqa.pipelines.questions.rows import stable_id

from .conftest import reference_figures

CASES = reference_figures("beir_loader.json")["beir"]
PLAIN = "quotes, tabs, non-ascii, nfd and zero-width"


class Refused:
    """odqa refuses the folder at `file:line`; `hidden` (the refused line's text) never shows."""

    def __init__(self, where: str, hidden: str, corpus: bool = False) -> None:
        self.where, self.hidden, self.corpus = where, hidden, corpus


# odqa's reading where BEIR's differs: why, in docs/interop.md's table.
DEPARTURES: dict[str, Callable[[dict[str, Any]], Any]] = {
    # blank lines are skipped; BEIR's json.loads stops at one
    "empty lines": lambda c: CASES[PLAIN]["records"],
    # BEIR skips the first line whatever it is: a file without the header loses its first judgement
    "qrels without a header": lambda c: Refused("qrels/test.tsv:1", "d1"),
    # BEIR stops with a KeyError; odqa names the qrels line
    "qrels names a query queries.jsonl lacks": lambda c: Refused("qrels/test.tsv:5", "q9"),
    # BEIR keeps None as the passage's text
    "text null": lambda c: Refused("corpus.jsonl:3", "Queequeg", corpus=True),
    # csv.reader reads on into the next line: two judgements become one
    "qrels quote left open": lambda c: Refused("qrels/test.tsv:2", "d1"),
}


def write_folder(root: Path, files: dict[str, str]) -> Path:
    folder = root / "conf"
    for name, content in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content.encode("utf-8"))
    return folder


def odqa_import(folder: Path) -> dict[str, Any]:
    """`import questions --format beir`'s rows as the loader's three dicts (odqa's ids)."""
    imported = import_questions("beir", folder, "conf", "test")
    questions = imported.questions.to_table().to_pylist()
    qrels: dict[str, dict[str, int]] = {}
    for row in imported.qrels.to_table().to_pylist():
        qrels.setdefault(row["question_id"], {})[row["passage_id"]] = row["relevance"]
    return {
        "corpus": {p["passage_id"]: {"text": p["text"], "title": p["title"]} for p in imported.passages.to_table().to_pylist()},
        "queries": {q["question_id"]: q["question"] for q in questions},
        "qrels": qrels,
        "positives": {q["question_id"]: sorted(q["positive_ids"]) for q in questions},
    }


def in_odqa_terms(records: dict[str, Any]) -> dict[str, Any]:
    """BEIR's dicts with odqa's ids (`conf:` + corpus id, a hash of dataset, split and query id), a
    missing title as "", and each judged query's positives (relevance > 0)."""
    qid = lambda query: stable_id("conf", "test", query)  # noqa: E731
    return {
        "corpus": {f"conf:{i}": {"text": p["text"], "title": p["title"] or ""} for i, p in records["corpus"].items()},
        "queries": {qid(q): text for q, text in records["queries"].items()},
        "qrels": {qid(q): {f"conf:{c}": s for c, s in judged.items()} for q, judged in records["qrels"].items()},
        "positives": {qid(q): sorted(f"conf:{c}" for c, s in judged.items() if s > 0) for q, judged in records["qrels"].items()},
    }


def corpus_passages(folder: Path) -> dict[str, dict[str, str]]:
    """`import passages --format beir`'s rows by passage id."""
    return {row["passage_id"]: {"text": row["text"], "title": row["title"]}
            for batch in read_beir_corpus(folder) for row in batch.to_pylist()}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_odqa_reads_what_beirs_loader_reads(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    folder = write_folder(tmp_path, case["files"])
    want = DEPARTURES[name](case) if name in DEPARTURES else None
    if isinstance(want, Refused) or (want is None and "error" in case):
        with pytest.raises(ImportFormatError) as error:
            odqa_import(folder)
        message = str(error.value)
        where = want.where if isinstance(want, Refused) else "corpus.jsonl"  # the loader's own stop: a BOM
        assert message.startswith(f"{folder / where}"), message
        if isinstance(want, Refused):
            assert want.hidden not in message.replace(str(folder), ""), f"the refusal quotes the file: {message}"
        if want is None or want.corpus:
            with pytest.raises(PassageFormatError, match="^" + re.escape(str(folder / where))):
                corpus_passages(folder)
        return
    records = want if want is not None else case["records"]
    assert odqa_import(folder) == in_odqa_terms(records)
    assert corpus_passages(folder) == {i: {"text": p["text"], "title": p["title"] or ""}
                                       for i, p in records["corpus"].items()}  # fmt: skip
