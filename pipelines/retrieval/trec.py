"""TREC run files (``qid Q0 docid rank score tag``), the exchange format of IR toolkits.

Writing lets trec_eval, ranx or pyserini's tools read our runs; reading imports runs produced
elsewhere. On import the ranks are re-derived from the scores (highest first; equal scores
keep the file's order), because trec_eval and ranx ignore the rank column and order by score,
and our metrics trust ``rank``: re-deriving keeps all three in agreement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from ...storage.atomic import atomic_text_file
from ...storage.ids import check_passage_id
from .runs import RUN_SCHEMA


class TrecFormatError(ValueError):
    """A line of a TREC run file is not ``qid Q0 docid rank score tag``."""


def _check_token(value: str, what: str, row: int) -> str:
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"run row {row}: {what} {value!r} is empty or contains whitespace")
    return value


def write_trec_run(batches: Iterable[pa.RecordBatch | pa.Table], path: Path, *, tag: str) -> int:
    """Write run rows (question_id, passage_id, rank, score) as a TREC run file; returns rows.

    Written to a temporary name and renamed, so readers never see half a file.
    """
    _check_token(tag, "run tag", 0)
    path = Path(path)
    rows = 0
    with atomic_text_file(path) as out:
        for batch in batches:
            columns = [batch.column(name).to_pylist() for name in ("question_id", "passage_id", "rank", "score")]
            for qid, pid, rank, score in zip(*columns, strict=True):
                rows += 1
                out.write(
                    f"{_check_token(str(qid), 'question id', rows)} Q0 "
                    f"{_check_token(str(pid), 'passage id', rows)} {int(rank)} {float(score)!r} {tag}\n"
                )
    return rows


def read_trec_run(path: Path, first_lines: int | None = None) -> pa.Table:
    """Read a TREC run file into run rows, ranks re-derived from scores within each question.

    Blank lines are skipped; a malformed line or a passage listed twice for one question is
    an error naming the file and line. ``first_lines``: read only that many lines (a check of the
    file's head before the whole import).
    """
    path = Path(path)
    qids: list[str] = []
    pids: list[str] = []
    scores: list[float] = []
    seen: dict[tuple[str, str], int] = {}
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if first_lines is not None and number > first_lines:
                break
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 6:
                raise TrecFormatError(
                    f"{path}:{number}: expected 6 fields 'qid Q0 docid rank score tag', "
                    f"got {len(fields)}: {line.strip()[:200]!r}"
                )
            qid, _, pid, rank, score, _ = fields
            check_passage_id(pid, f"{path}:{number}")
            try:
                int(rank)
                value = float(score)
                if not math.isfinite(value):
                    raise ValueError
            except ValueError:
                raise TrecFormatError(
                    f"{path}:{number}: rank {rank!r} must be an integer and score {score!r} a finite number"
                ) from None
            if (qid, pid) in seen:
                raise TrecFormatError(
                    f"{path}:{number}: passage {pid!r} listed again for question {qid!r} "
                    f"(first at line {seen[qid, pid]})"
                )
            seen[qid, pid] = number
            qids.append(qid)
            pids.append(pid)
            scores.append(value)
    table = pa.table(
        {
            "question_id": qids,
            "passage_id": pids,
            "order": list(range(len(qids))),
            "score": pa.array(scores, pa.float64()),
        }
    )
    table = table.sort_by([("question_id", "ascending"), ("score", "descending"), ("order", "ascending")])
    ranks = _ranks_within_groups(table["question_id"])
    return pa.table(
        [table["question_id"], table["passage_id"], ranks, table["score"]],
        schema=RUN_SCHEMA,
    )


def _ranks_within_groups(sorted_keys: pa.ChunkedArray) -> pa.Array:
    """1, 2, 3, ... restarting wherever the (sorted) key changes."""
    ranks: list[int] = []
    previous = None
    for key in sorted_keys.to_pylist():
        ranks.append(ranks[-1] + 1 if key == previous else 1)
        previous = key
    return pa.array(ranks, pa.int32())
