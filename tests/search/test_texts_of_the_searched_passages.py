"""The stages that match answers in what a searcher found read the texts of the passages its
index was built from (`Searcher.passages_version`), not of whatever was imported since it opened.

A mining round on an index of passages v1, with passage "a" re-imported meanwhile without its
answer, must still see "a" as answer-bearing (it was, in what the index searched) and never mine
it as a negative; the same for BM25 negatives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from odqa.pipelines.search.hits import Hits
from odqa.storage import Workspace
from odqa.storage.tables import Transaction


class Fixed:
    """A searcher answering every question with the same passages, of one passages version."""

    kind = "bm25"

    def __init__(self, passages_version: str) -> None:
        self.passages_version = passages_version

    def search(self, questions: Sequence[str], k: int) -> Hits:
        return Hits.from_ranked([[("a", 3.0), ("b", 2.0), ("c", 1.0)][:k] for _ in questions])

    def describe(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        """Nothing to release."""


def _passages(ws: Workspace, texts: dict[str, str]) -> str:
    with Transaction(ws.root, "test-passages") as tx:
        tx.replace_source("passages", "corpus")
        tx.write("passages", [{"passage_id": pid, "title": "T", "text": text} for pid, text in texts.items()], "corpus")
    return ws.table_version("passages")


QUESTIONS = pa.table({"question_id": ["q"], "question": ["where was she born?"], "answers": [["Warsaw"]],
                      "positive_ids": pa.array([None], pa.list_(pa.string()))})  # fmt: skip


def test_mining_and_bm25_negatives_match_answers_in_the_searched_passages(workspace: Workspace) -> None:
    from odqa.flows.stages.mine import mine_questions
    from odqa.flows.stages.negatives import _search_negatives

    searched = _passages(workspace, {"a": "born in Warsaw", "b": "the Seine", "c": "Mount Fuji"})
    _passages(workspace, {"a": "two Nobel prizes", "b": "the Seine", "c": "Mount Fuji"})  # imported since
    mined = mine_questions(workspace, Fixed(searched), QUESTIONS, depth=3, count=3, mode="string")
    assert mined.negatives.column("hard_negative_ids").to_pylist() == [["b", "c"]]
    negatives = _search_negatives(workspace, Fixed(searched), QUESTIONS, count=3, depth=3)
    assert list(negatives.values()) == [["b", "c"]]
    # the current passages' searcher (an index of today's texts) finds no answer in "a"
    today = workspace.table_version("passages")
    assert mine_questions(workspace, Fixed(today), QUESTIONS, depth=3, count=3, mode="string").negatives.column(
        "hard_negative_ids").to_pylist() == [["a", "b", "c"]]  # fmt: skip
