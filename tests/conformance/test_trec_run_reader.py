"""`odqa import run` reads a TREC run file as trec_eval's own C code reads it.

trec_eval splits a line at ASCII whitespace (space, tab, \\v, \\f, \\r), skips blank lines and
lines starting with `#`, ignores columns after the sixth and refuses a passage listed twice for
one question (README.md). The fixture holds tricky run files and what trec_eval read: each
question's passages in its rank order, with their scores. odqa must read the same, except where
trec_eval reads a score that is not a number as 0 (or its leading digits), or breaks ties by
passage id (the DEPARTURES, stated in docs/interop.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from odqa.pipelines.retrieval.trec import TrecFormatError, read_trec_run
from odqa.storage.ids import IdRuleError

from .conftest import reference_figures

CASES = reference_figures("trec_run.json")["trec_run"]


class Refused:
    """odqa refuses the file at `line`."""

    def __init__(self, line: int) -> None:
        self.line = line


# odqa's reading where trec_eval's differs: why, in docs/interop.md's table.
DEPARTURES: dict[str, Callable[[dict[str, Any]], Any]] = {
    # equal scores keep the file's order (trec_eval: passage id, descending); see "Tied scores"
    "tied scores": lambda c: {"q1": [["a", 1.0], ["c", 1.0], ["b", 1.0]]},
    # trec_eval's atof reads these as 0, 2.5 and 1: odqa takes a score only when it is a decimal number
    "score that is not a number": lambda c: Refused(2),
    "score with trailing text": lambda c: Refused(1),
    "score with underscores": lambda c: Refused(1),
    # trec_eval never reads the rank; odqa refuses one that is not an integer (columns in another order)
    "rank that is not a number": lambda c: Refused(1),
    # a passage id holds no whitespace (the passage-id rule): trec_eval's C whitespace is ASCII only
    "non-ascii ids and a non-breaking space": lambda c: Refused(2),
}


def odqa_ranking(path: Path) -> dict[str, list[list[Any]]]:
    table = read_trec_run(path).sort_by([("question_id", "ascending"), ("rank", "ascending")])
    ranking: dict[str, list[list[Any]]] = {}
    for row in table.to_pylist():
        ranking.setdefault(row["question_id"], []).append([row["passage_id"], row["score"]])
    return ranking


@pytest.mark.parametrize("name", list(CASES))
def test_odqa_reads_what_trec_eval_reads(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    path = tmp_path / "run.trec"
    path.write_bytes(case["content"].encode("utf-8"))
    want = DEPARTURES[name](case) if name in DEPARTURES else None
    if isinstance(want, Refused) or (want is None and "error" in case):
        with pytest.raises((TrecFormatError, IdRuleError)) as error:
            odqa_ranking(path)
        line = want.line if isinstance(want, Refused) else None
        assert str(error.value).startswith(f"{path}:{line}:" if line else str(path)), str(error.value)
        return
    assert odqa_ranking(path) == (want if want is not None else case["records"]["ranking"])
