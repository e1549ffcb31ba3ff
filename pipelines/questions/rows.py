"""The row shapes question steps return: questions, passages and qrels as Arrow tables.

Column names and types are those of the workspace tables in DESIGN.md (`questions`,
`passages`, `qrels`), so a flow can write what a step returns without reshaping. Steps here do
not import `storage/`: they only promise these columns, and the writer checks them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

_STR_LIST = pa.list_(pa.string())

QUESTION_SCHEMA = pa.schema(
    [
        ("question_id", pa.string()),
        ("dataset", pa.string()),
        ("split", pa.string()),
        ("question", pa.string()),
        ("answers", _STR_LIST),
        ("relation", pa.string()),
        ("subject", pa.string()),
        ("subject_id", pa.string()),
        ("positive_ids", _STR_LIST),
        ("hard_negative_ids", _STR_LIST),
        ("domains", _STR_LIST),
    ]
)

PASSAGE_SCHEMA = pa.schema(
    [
        ("passage_id", pa.string()),
        ("article_id", pa.int64()),
        ("title", pa.string()),
        ("text", pa.string()),
        ("position", pa.int32()),
        ("source", pa.string()),
    ]
)

QREL_SCHEMA = pa.schema(
    [
        ("dataset", pa.string()),
        ("split", pa.string()),
        ("question_id", pa.string()),
        ("passage_id", pa.string()),
        ("relevance", pa.int32()),
    ]
)


def stable_id(*parts: str) -> str:
    """A 16-hex-digit id from the parts: the same inputs give the same id on every run."""
    return hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:16]


def unique_in_order(values: Iterable[str]) -> list[str]:
    """Values without repeats, first occurrence kept (answer lists: label first, then aliases)."""
    seen: set[str] = set()
    out = []
    for value in values:
        if value not in seen:
            seen.add(value)
            out.append(value)
    return out


def question_row(
    *,
    question_id: str,
    dataset: str,
    split: str,
    question: str,
    answers: Sequence[str],
    relation: str | None = None,
    subject: str | None = None,
    subject_id: str | None = None,
    positive_ids: Sequence[str] = (),
    hard_negative_ids: Sequence[str] = (),
) -> dict[str, Any]:
    """One `questions` row; `domains` stays empty until domain labelling fills it."""
    return {
        "question_id": question_id,
        "dataset": dataset,
        "split": split,
        "question": question,
        "answers": list(answers),
        "relation": relation,
        "subject": subject,
        "subject_id": subject_id,
        "positive_ids": list(positive_ids),
        "hard_negative_ids": list(hard_negative_ids),
        "domains": [],
    }


def table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts with exactly the schema's columns) as an Arrow table of that schema."""
    return pa.Table.from_pylist(list(rows), schema=schema)
