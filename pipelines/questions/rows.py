"""The row shapes question steps return: questions, passages and qrels as Arrow tables.

Column names and types are those of the workspace tables (`questions`, `passages`, `qrels`),
taken from storage's schema definitions, so a flow can write what a step returns without
reshaping and the layout has one definition.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from ...storage.schemas import row_schema

QUESTION_SCHEMA = row_schema("questions", without=())

PASSAGE_SCHEMA = row_schema("passages", without=())

QREL_SCHEMA = row_schema("qrels", without=())


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
