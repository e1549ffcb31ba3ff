"""Reads and updates of the `questions` (and `qrels`) tables that the stages share.

A dataset split is named by (dataset, split); an unknown pair is an error that lists the known
ones, so a typo on the command line is answered with what exists.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .fingerprint import fingerprint
from .tables import Transaction
from .workspace import Workspace

EVALUATION_COLUMNS = ["question_id", "dataset", "split", "answers", "relation", "positive_ids", "positives_from"]


def _split_filter(dataset: str, split: str) -> pc.Expression:
    return (pc.field("dataset") == dataset) & (pc.field("split") == split)


def known_splits(ws: Workspace) -> list[tuple[str, str]]:
    """Every (dataset, split) of the questions table, sorted."""
    if not ws.rows("questions"):
        return []
    table = ws.read_table("questions", columns=["dataset", "split"])
    pairs = zip(table.column("dataset").to_pylist(), table.column("split").to_pylist(), strict=True)
    return sorted(set(pairs))


def load_questions(ws: Workspace, dataset: str, split: str, columns: list[str] | None = None) -> pa.Table:
    """The questions of one dataset split; an unknown pair is an error listing what exists."""
    table = ws.read_table("questions", columns=columns, filter=_split_filter(dataset, split))
    if table.num_rows == 0:
        listing = ", ".join(f"{d}/{s}" for d, s in known_splits(ws)) or "none"
        raise ValueError(f"no questions for dataset {dataset!r} split {split!r}; known: {listing}")
    return table


def questions_fingerprint(ws: Workspace, dataset: str, split: str, columns: list[str]) -> str:
    """Content hash of the columns a stage reads from one dataset split's questions."""
    table = load_questions(ws, dataset, split, columns).sort_by("question_id")
    return fingerprint(dataset, split, [table.column(c).to_pylist() for c in columns])


def positives_fingerprint(ws: Workspace) -> str:
    """Content hash of every question's (question_id, positive_ids), for stages (domain labels)
    that rewrite the questions table themselves and so cannot key on its file version."""
    if not ws.rows("questions"):
        return "none"
    table = ws.read_table("questions", columns=["question_id", "positive_ids"])
    table = table.take(pc.sort_indices(table, [("question_id", "ascending")]))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table.combine_chunks())
    return hashlib.sha256(memoryview(sink.getvalue())).hexdigest()


def questions_with_ids(ws: Workspace, question_ids: Sequence[str], columns: list[str]) -> pa.Table:
    wanted = pa.array(sorted(set(question_ids)), pa.string())
    return ws.read_table("questions", columns=columns, filter=pc.field("question_id").isin(wanted))


def questions_of_splits(ws: Workspace, specs: Sequence[tuple[str, str]] | None, columns: list[str]) -> pa.Table:
    """Questions of the given (dataset, split) pairs, a dataset's every split when the split is
    empty, or every question when `specs` is None."""
    selector = None
    for dataset, split in specs or []:
        one = (pc.field("dataset") == dataset) & (pc.field("split") == split) if split else pc.field("dataset") == dataset
        selector = one if selector is None else selector | one
    return ws.read_table("questions", columns=columns, filter=selector)


def relevance_judgments(ws: Workspace, dataset: str, split: str) -> dict[str, dict[str, int]]:
    """qid -> passage id -> relevance of the split's `qrels` rows, for questions with at least
    one relevant passage (empty when the split has no judgments)."""
    table = ws.read_table("qrels", columns=["question_id", "passage_id", "relevance"],
                          filter=_split_filter(dataset, split))  # fmt: skip
    judged: dict[str, dict[str, int]] = {}
    for qid, pid, relevance in zip(*(table.column(i).to_pylist() for i in range(3)), strict=True):
        judged.setdefault(qid, {})[pid] = int(relevance)
    return {qid: found for qid, found in judged.items() if any(r > 0 for r in found.values())}


def _set_split_columns(tx: Transaction, dataset: str, split: str, values: Mapping[str, Mapping[str, object]]) -> int:
    """Replace columns of the split's given questions (question_id -> column -> new value) in the
    parts that hold them; returns the questions updated.

    Each part keeps the source that imported it (storage's `rewrite`), so a later import of that
    source still replaces its rows as a whole."""
    if not values:
        return 0
    updated = 0
    columns = sorted({name for changes in values.values() for name in changes})

    def set_values(part: pa.Table) -> pa.Table:
        nonlocal updated
        mine = pc.and_(pc.equal(part["dataset"], dataset), pc.equal(part["split"], split)).to_pylist()
        ids = part["question_id"].to_pylist()
        targets = [values.get(qid) if in_split else None for qid, in_split in zip(ids, mine, strict=True)]
        updated += sum(1 for target in targets if target is not None)
        for name in columns:
            index = part.schema.get_field_index(name)
            new = [target[name] if target is not None and name in target else old
                   for old, target in zip(part[name].to_pylist(), targets, strict=True)]  # fmt: skip
            part = part.set_column(index, part.schema.field(index), pa.array(new, part.schema.field(index).type))
        return part

    tx.rewrite("questions", set_values)
    return updated


def set_hard_negatives(tx: Transaction, dataset: str, split: str, negatives: Mapping[str, list[str]]) -> int:
    """Replace `hard_negative_ids` of the split's given questions; returns the questions updated."""
    return _set_split_columns(tx, dataset, split, {qid: {"hard_negative_ids": ids} for qid, ids in negatives.items()})


def set_derived_positives(tx: Transaction, dataset: str, split: str, positives: Mapping[str, list[str]],
                          origin: str) -> int:  # fmt: skip
    """Set `positive_ids` of the split's given questions to positives derived by distant
    supervision and mark them with `positives_from` = ``origin`` (a question that got none is
    left without positives and unmarked); returns the questions updated."""
    return _set_split_columns(tx, dataset, split, {
        qid: {"positive_ids": ids, "positives_from": origin if ids else None} for qid, ids in positives.items()})
