"""BM25 negatives are searched once per question content, index and parameters: a copy of a split
under another name (what `odqa experiment` makes for each architecture) takes the negatives the
first search found, counted as `reused`; a question whose text changed is searched again."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from odqa.storage import Workspace
from tests.models.filled_workspace import fill_workspace


def _copy_split(ws: Workspace, split: str, copy: str, changed: dict[str, str]) -> None:
    """The split's questions again as `copy`, with new ids (as a recipe's copies have) and the
    questions' texts of `changed` (id -> text) replaced."""
    rows = ws.read_table("questions", filter=pc.field("split") == split).to_pylist()
    for row in rows:
        row["question"] = changed.get(row["question_id"], row["question"])
        row["question_id"], row["split"] = f"{copy}-{row['question_id']}", copy
    with ws.transaction(f"copy-{copy}") as tx:
        tx.write("questions", pa.Table.from_pylist(rows), source=f"copy-{copy}")


def _negatives(ws: Workspace, split: str) -> list[list[str]]:
    table = ws.read_table("questions", filter=pc.field("split") == split).sort_by("question")
    return table["hard_negative_ids"].to_pylist()


def test_a_copy_of_the_questions_reuses_their_negatives_and_a_changed_question_is_searched(
    prefect_harness: str, java: None, tmp_path: Path
) -> None:
    from odqa.flows.stages.bm25 import bm25_index_flow
    from odqa.flows.stages.negatives import bm25_negatives_flow

    root = tmp_path / "ws"
    fill_workspace(root, negatives=False)
    ws = Workspace.resolve(root)
    bm25_index_flow(workspace=str(root), threads=1)
    first = bm25_negatives_flow(dataset="toy", split="train", workspace=str(root))
    assert (first.questions, first.searched, first.reused) == (7, 7, 0)

    _copy_split(ws, "train", "copy", {})
    copied = bm25_negatives_flow(dataset="toy", split="copy", workspace=str(root))
    assert (copied.questions, copied.searched, copied.reused) == (7, 0, 7)
    assert _negatives(ws, "copy") == _negatives(ws, "train") and any(_negatives(ws, "copy"))

    _copy_split(ws, "train", "edited", {"toy-0": "Who wrote the tragedy Hamlet?"})
    edited = bm25_negatives_flow(dataset="toy", split="edited", workspace=str(root))
    assert (edited.searched, edited.reused) == (1, 6)
    deeper = bm25_negatives_flow(dataset="toy", split="copy", depth=50, workspace=str(root))
    assert (deeper.searched, deeper.reused) == (7, 0)  # other parameters: searched again
