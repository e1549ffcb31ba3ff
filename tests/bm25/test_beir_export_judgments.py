"""`odqa export beir` writes the judgments `odqa evaluate` scores against, and refuses a split that
has none instead of writing an empty qrels file in silence (issue 37)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odqa.flows.stages.evaluate import split_judgments
from odqa.storage import Workspace
from odqa.storage.questions import load_questions
from tests.bm25.test_beir_export import _read_qrels
from tests.models.filled_workspace import fill_workspace


def _question(qid: str, split: str, positives: list[str]) -> dict:
    return {"question_id": qid, "dataset": "toy", "split": split, "question": f"Question {qid}?", "answers": ["x"],
            "positive_ids": positives, "hard_negative_ids": [], "domains": []}  # fmt: skip


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The toy workspace plus split `unjudged` (answers only, as dpr-qas and nq-open import) and split
    `graded` (graded qrels rows, and its positives as a BEIR import derives them)."""
    root = tmp_path / "ws"
    fill_workspace(root)
    questions = [_question("u1", "unjudged", []), _question("u2", "unjudged", []),
                 _question("g1", "graded", ["p0", "p1"]), _question("g2", "graded", ["p2"])]  # fmt: skip
    qrels = [{"dataset": "toy", "split": "graded", "question_id": qid, "passage_id": pid, "relevance": relevance}
             for qid, pid, relevance in (("g1", "p0", 2), ("g1", "p1", 1), ("g1", "n0", 0), ("g2", "p2", 1))]  # fmt: skip
    with Workspace.resolve(root).transaction("more-toy") as tx:
        tx.write("questions", questions, source="more-toy")
        tx.write("qrels", qrels, source="more-toy")
    return root


def test_a_split_without_judgments_is_refused_naming_it_and_the_way_out(cli, ws: Path, tmp_path: Path):
    out = tmp_path / "beir"
    result = cli("--workspace", str(ws), "export", "beir", "toy", "unjudged", "--out", str(out), ok=False)
    assert result.exit_code == 1
    assert "toy/unjudged: none of its 2 questions has a judged passage (no qrels rows, no positive_ids)" in result.output
    assert "import the split from a file with positive passages" in result.output
    assert "--allow-empty-qrels" in result.output
    assert not out.exists()


def test_allow_empty_qrels_exports_the_split_with_a_warning_and_its_counts(cli, ws: Path, tmp_path: Path):
    out = tmp_path / "beir"
    result = cli("--workspace", str(ws), "export", "beir", "toy", "unjudged", "--out", str(out), "--allow-empty-qrels")
    assert "export beir: done" in result.output
    assert "  judged_queries: 0" in result.output and "           qrels: 0" in result.output
    assert "odqa: warning: toy/unjudged: none of its 2 questions has a judged passage" in result.output
    assert (out / "qrels" / "unjudged.tsv").read_text() == "query-id\tcorpus-id\tscore\n"
    assert len((out / "queries.jsonl").read_text().splitlines()) == 2


def test_graded_qrels_are_exported_as_evaluate_scores_them(cli, ws: Path, tmp_path: Path):
    out = tmp_path / "beir"
    result = cli("--workspace", str(ws), "export", "beir", "toy", "graded", "--out", str(out))
    assert "qrels_source: qrels" in result.output and "warning" not in result.output
    workspace = Workspace.resolve(ws)
    evaluated, source = split_judgments(workspace, "toy", "graded", load_questions(workspace, "toy", "graded"))
    assert source == "qrels"
    assert _read_qrels(out / "qrels" / "graded.tsv") == evaluated == {"g1": {"p0": 2, "p1": 1, "n0": 0}, "g2": {"p2": 1}}
