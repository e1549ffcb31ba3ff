"""TREC run files (``qid Q0 docid rank score tag``), the exchange format of IR toolkits.

Writing lets trec_eval, ranx or pyserini's tools read our runs; reading imports runs produced
elsewhere. On import the ranks are re-derived from the scores (highest first; equal scores
keep the file's order), because trec_eval and ranx ignore the rank column and order by score,
and our metrics trust ``rank``: re-deriving keeps all three in agreement.

A run file is read as trec_eval's own C reader reads it (get_trec_results.c): bytes split at
ASCII whitespace (space, tab, \\v, \\f, \\r; not a non-breaking space), blank lines and lines
starting with `#` skipped, columns after the sixth ignored. Where trec_eval reads garbage
silently odqa refuses, naming the line: a score that is not a decimal number (trec_eval's `atof`
reads `abc` as 0 and `2.5abc` as 2.5), a rank that is not an integer (trec_eval never reads it;
here it catches a file whose columns are in another order), bytes that are not UTF-8.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from ...storage.atomic import atomic_text_file
from ...storage.ids import check_passage_id
from .runs import RUN_SCHEMA


class TrecFormatError(ValueError):
    """A line of a TREC run file is not ``qid Q0 docid rank score tag``."""


# The numbers trec_eval's atof and Python's float read alike (no `inf`, `nan`, `1_0`, hex, non-ASCII digits).
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"[+-]?[0-9]+")


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


def _fields(path: Path, number: int, raw: bytes) -> list[str]:
    """The whitespace-separated fields of one line (ASCII whitespace, as trec_eval's C `isspace`)."""
    try:
        return [field.decode("utf-8") for field in raw.split()]
    except UnicodeDecodeError:
        raise TrecFormatError(f"{path}:{number}: not UTF-8; run files must be UTF-8") from None


def read_trec_run(path: Path, first_lines: int | None = None) -> pa.Table:
    """Read a TREC run file into run rows, ranks re-derived from scores within each question.

    Blank lines and `#` comments are skipped, columns after the sixth ignored (as trec_eval
    does); a malformed line or a passage listed twice for one question is an error naming the
    file and line, and so is a file without a single result. ``first_lines``: read only that many lines (a check of the file's head before
    the whole import).
    """
    path = Path(path)
    qids: list[str] = []
    pids: list[str] = []
    scores: list[float] = []
    seen: dict[tuple[str, str], int] = {}
    whole = True  # the file was read to its end
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if first_lines is not None and number > first_lines:
                whole = False
                break
            fields = _fields(path, number, raw)
            if not fields or fields[0].startswith("#"):
                continue
            if len(fields) < 6:
                raise TrecFormatError(
                    f"{path}:{number}: expected 6 fields 'qid Q0 docid rank score tag', "
                    f"got {len(fields)}: {' '.join(fields)[:200]!r}"
                )
            qid, _, pid, rank, score = fields[:5]
            check_passage_id(pid, f"{path}:{number}")
            value = float(score) if _DECIMAL.fullmatch(score) else math.nan
            if not (_INTEGER.fullmatch(rank) and math.isfinite(value)):
                raise TrecFormatError(
                    f"{path}:{number}: rank {rank!r} must be an integer and score {score!r} a finite number "
                    "(digits with an optional '.' and exponent: trec_eval would read anything else as 0 or as "
                    "its leading digits)"
                )
            if (qid, pid) in seen:
                raise TrecFormatError(
                    f"{path}:{number}: passage {pid!r} listed again for question {qid!r} "
                    f"(first at line {seen[qid, pid]})"
                )
            seen[qid, pid] = number
            qids.append(qid)
            pids.append(pid)
            scores.append(value)
    if whole and not qids:  # else the import reported a run of 0 rows that no verb then found
        raise TrecFormatError(f"{path}: no results (an empty file, or only blank and '#' lines); a run file holds one "
                              "line 'qid Q0 docid rank score tag' per retrieved passage")  # fmt: skip
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
