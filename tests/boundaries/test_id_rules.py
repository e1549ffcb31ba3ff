"""Ids are checked once, at the door (issue 41, point 4).

Every id a later stage would refuse (passage, question, model, run) is refused where it comes in,
naming the file and line (or JSON element) and the rule, by the one module that states the rules
(`storage/ids.py`); and a bad id that an older odqa let in does not make a whole-workspace stage
(the BM25 index) fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odqa.pipelines.passage_formats import read_beir_corpus
from odqa.pipelines.questions.imports import import_questions
from odqa.storage import Workspace
from odqa.storage.experiments import experiment_model, round_model, run_name
from odqa.storage.ids import (
    NAME_MAX_BYTES,
    IdRuleError,
    check_model_id,
    check_passage_id,
    check_question_id,
    check_run_name,
)
from tests.boundaries.conftest import workspace_state
from tests.models.filled_workspace import fill_workspace

NAME_RULE = "model ids and run names are 1 to 128 bytes"


def _consume(fmt: str, path: Path, dataset: str = "nq", split: str = "dev") -> None:
    """Read every question, passage and qrel of an import (what the import stage does)."""
    imported = import_questions(fmt, path, dataset, split)
    for part in (imported.questions, imported.passages, imported.qrels):
        if part is not None:
            list(part)


def test_the_rules_of_each_kind_of_id() -> None:
    for good in ("p1", "12345", "nq:0-3", "wiki_123_4", "é" * 512, 42):
        check_passage_id(good, "f:1")
    for bad, problem in [("p 1", "U+0020"), ("p\t1", "U+0009"), ("", "empty"), ("a\x00b", "U+0000"),
                         ("x" * 1025, "1,025 bytes"), ({"a": 1}, "an object"), ([1], "a list"),
                         (True, "a boolean"), (1.5, "a fraction"), (None, "null")]:  # fmt: skip
        with pytest.raises(IdRuleError, match="f:1: .*passage id") as refused:
            check_passage_id(bad, "f:1")
        assert problem in str(refused.value)
    assert check_question_id("what? with spaces", "f:2") == "what? with spaces" and check_question_id(7, "f:2") == "7"
    with pytest.raises(IdRuleError, match=r"f:2: the question id is an object; "):
        check_question_id({"a": 1}, "f:2")
    for good in ("m", "sde-nq_v2.1", "recipe:m", "é" * 64):
        assert check_model_id(good) == good and check_run_name(good) == good
    for bad, problem in [("", "empty"), ("-rf", "starts with '-'"), (".training", "starts with '.'"),
                         ("a/b", "path separator"), ("a\\b", "path separator"), ("a\nb", "U+000A"),
                         ("a b", "U+0020"), ("a\x00", "U+0000"), ("x" * 129, "129 bytes"),
                         ("é" * 65, "130 bytes")]:  # fmt: skip
        for check, what in ((check_model_id, "model id"), (check_run_name, "run name")):
            with pytest.raises(IdRuleError, match=f"{what} .* is refused") as refused:
                check(bad)
            assert problem in str(refused.value) and NAME_RULE in str(refused.value)


def test_names_odqa_derives_follow_the_rule() -> None:
    long = "x" * 300
    for name in (run_name(long, "nq", "test"), experiment_model(long, "ade"), run_name("-m", "nq", "test")):
        assert check_run_name(name) == name and len(name) <= NAME_MAX_BYTES
    assert run_name(long, "nq", "test") == run_name(long, "nq", "test") != run_name(long, "nq", "dev")
    with pytest.raises(IdRuleError, match="-round2' is refused: it is 131 bytes long"):  # the recipe checks its last round
        check_model_id(round_model("m" * 124, 2))


def test_a_passage_id_with_a_space_is_refused_at_import(cli, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    fill_workspace(root)
    tsv = tmp_path / "passages.tsv"
    tsv.write_text("id\ttext\ttitle\np1x\tfine\tA\np 2\ttwo\tB\n", encoding="utf-8")
    before = workspace_state(root)
    result = cli("--workspace", str(root), "import", "passages", "--format", "dpr-tsv", str(tsv), ok=False)
    assert f"{tsv}:3: the passage id is refused: it holds the character ' '" in result.output, result.output
    assert "without whitespace or control characters" in result.output
    assert workspace_state(root) == before
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "x"}\n{"_id": {"a": 1}, "text": "y"}\n', encoding="utf-8")
    with pytest.raises(IdRuleError, match=rf"{corpus}:2: the passage id is an object"):
        list(read_beir_corpus(corpus))


def test_a_dpr_json_passage_id_that_is_an_object_is_refused_at_import(cli, tmp_path: Path) -> None:
    """The issue's case: it was stored as "{'a': 1}", and `odqa bm25 index` then failed."""
    root = tmp_path / "ws"
    fill_workspace(root)
    path = tmp_path / "train.json"
    context = {"title": "T", "text": "t", "passage_id": "ok-1"}
    path.write_text(json.dumps([
        {"question": "q1?", "answers": ["a"], "positive_ctxs": [context]},
        {"question": "q2?", "answers": ["a"], "positive_ctxs": [context],
         "hard_negative_ctxs": [{**context, "passage_id": {"a": 1}}]},
    ]), encoding="utf-8")  # fmt: skip
    before = workspace_state(root)
    result = cli("--workspace", str(root), "import", "questions", "--format", "dpr-json", "--dataset", "nq",
                 "--split", "train", str(path), ok=False)  # fmt: skip
    assert f"{path}: element 1, hard_negative_ctxs[0].passage_id: the passage id is an object; " \
        in result.output, result.output  # fmt: skip
    assert workspace_state(root) == before
    path.write_text(json.dumps([{"question_id": ["x"], "question": "q?", "answers": ["a"]}]), encoding="utf-8")
    with pytest.raises(IdRuleError, match=r"element 0.question_id: the question id is a list"):
        _consume("dpr-json", path)


def test_passage_ids_made_from_the_dataset_name_are_checked(tmp_path: Path) -> None:
    squad = tmp_path / "squad.json"
    squad.write_text(json.dumps({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": []}]}]}))
    with pytest.raises(IdRuleError, match=r"data\[0\].paragraphs\[0\] \(named after --dataset\): the passage id is refused: it holds the character ' '"):
        _consume("squad", squad, dataset="my set")
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "q?"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td 1\t1\n")
    with pytest.raises(IdRuleError, match=rf"{beir / 'qrels' / 'test.tsv'}:2: the passage id is refused"):
        _consume("beir", beir, dataset="scifact", split="test")


def test_model_ids_and_run_names_are_refused_when_the_command_is_parsed(cli, tmp_path: Path) -> None:
    w = ("--workspace", str(tmp_path / "ws"))
    for bad, problem in [("a\nb", "U+000A"), ("-rf", "starts with '-'"), ("x" * 300, "300 bytes long"),
                         ("a/b", "path separator")]:  # fmt: skip
        result = cli(*w, "train", "--train", "toy:train", "--model-id", bad, ok=False)
        assert result.exit_code == 2, result.output
        assert "Invalid value for '--model-id'" in result.output and problem in result.output, result.output
    result = cli(*w, "retrieve", "--dataset", "toy", "--split", "dev", "--run", "my run", ok=False)
    assert result.exit_code == 2 and "run name 'my run' is refused" in result.output, result.output
    result = cli(*w, "import", "run", "--run", ".hidden", str(tmp_path), ok=False)
    assert result.exit_code == 2 and "starts with '.'" in result.output, result.output


def test_a_bad_passage_id_in_an_older_workspace_does_not_fail_the_bm25_index(cli, java, tmp_path: Path) -> None:
    """Rows an older odqa let in (written straight into the table here) are skipped and counted."""
    root = tmp_path / "ws"
    fill_workspace(root)
    with Workspace.resolve(root).transaction("older-odqa") as tx:
        tx.write("passages", [{"passage_id": pid, "title": "Old", "text": "an old row", "position": 0}
                              for pid in ("has space", "{'a': 1}")], source="older-odqa")  # fmt: skip
    result = cli("--workspace", str(root), "bm25", "index", "--threads", "1")
    assert "bm25 index: done" in result.output
    assert "skipped_bad_ids" in result.output and "documents" in result.output
    report = json.loads((next((root / "indexes" / "bm25").iterdir()) / "odqa-index.json").read_text())
    assert (report["documents"], report["skipped_bad_ids"]) == (16, 2)
