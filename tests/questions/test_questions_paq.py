"""PAQ sampling on a hand-made metadata file: >= 3 filter, one question per passage, 70/15/15."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from odqa.pipelines.questions.jsonstream import JsonFormatError
from odqa.pipelines.questions.paq import PaqConfig, sample_paq


def _line(question: str, answer: list[str] | str, passage_ids: list[str | int]) -> str:
    return json.dumps({
        "question": question,
        "subsets": ["L1"],
        "answer": answer,
        "passage_score": -1.5,
        "answers": [{"passage_id": pid, "offset": 3, "text": "x", "extractor": "L"} for pid in passage_ids],
    })


def _paq_file(tmp_path: Path) -> tuple[Path, dict[str, set[str]]]:
    """20 passages with 3-5 questions, 2 with 2, one with 3 lines but only 2 distinct questions."""
    lines, by_passage = [], {}
    for p in range(20):
        pid = str(1000 + p)
        for q in range(3 + p % 3):
            question = f"question {q} about passage {pid}"
            lines.append(_line(question, [f"answer {q}"], [pid]))
            by_passage.setdefault(pid, set()).add(question)
    for pid in ("2001", "2002"):
        for q in range(2):
            lines.append(_line(f"lonely question {q} of {pid}", "solo", [pid, pid]))
    lines.append(_line("repeated question", ["r"], [3000]))
    lines.append(_line("repeated question", ["r"], [3000]))
    lines.append(_line("another question of 3000", ["r"], [3000]))
    lines.append(_line("shared question", ["s"], ["1000", "1001"]))  # generated from two passages
    by_passage["1000"].add("shared question")
    by_passage["1001"].add("shared question")
    lines.append(_line("question without passages", ["z"], []))
    lines.insert(5, "")
    path = tmp_path / "PAQ.metadata.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, by_passage


def test_filter_one_question_per_passage_and_exact_split(tmp_path: Path) -> None:
    path, by_passage = _paq_file(tmp_path)
    result = sample_paq(path, tmp_path / "tmp", config=PaqConfig(passages=100, seed=1, batch_rows=7))
    rows = result.questions.to_pylist()
    assert len(rows) == 20  # only the 20 passages with >= 3 distinct questions
    passages = [row["positive_ids"][0] for row in rows]
    assert sorted(passages) == sorted(by_passage) and len(set(passages)) == 20
    for row in rows:
        assert row["question"] in by_passage[row["positive_ids"][0]]
        assert row["dataset"] == "paq" and row["relation"] is None
    assert Counter(row["split"] for row in rows) == {"train": 14, "dev": 3, "test": 3}
    assert result.report["eligible_passages"] == 20 and result.report["passages"] == 23
    assert result.report["questions_without_passage"] == 1
    assert not list((tmp_path / "tmp").glob("*.parquet"))  # the spill file is cleaned up


def test_sampling_n_passages_is_deterministic_under_the_seed(tmp_path: Path) -> None:
    path, _ = _paq_file(tmp_path)

    def run(seed: int):
        return sample_paq(path, tmp_path / f"tmp{seed}", config=PaqConfig(passages=10, seed=seed)).questions

    first = run(7)
    assert first.equals(run(7))
    assert Counter(first.column("split").to_pylist()) == {"train": 7, "dev": 1, "test": 2}
    assert set(first.column("question_id").to_pylist()) != set(run(8).column("question_id").to_pylist())


def test_flipped_rows(tmp_path: Path) -> None:
    path, by_passage = _paq_file(tmp_path)
    result = sample_paq(path, tmp_path / "tmp", config=PaqConfig(passages=100, seed=1, negatives=2))
    flipped = result.flipped.to_pylist()
    assert len(flipped) == 20
    split_of = {row["positive_ids"][0]: row["split"] for row in result.questions.to_pylist()}
    kept = {row["positive_ids"][0]: row["question"] for row in result.questions.to_pylist()}
    for row in flipped:
        assert set(row["positive_questions"]) == by_passage[row["passage_id"]]
        assert row["split"] == split_of[row["passage_id"]]
        assert len(row["negative_questions"]) == 2
        same_split_questions = {kept[p] for p, s in split_of.items() if s == row["split"] and p != row["passage_id"]}
        assert set(row["negative_questions"]) <= same_split_questions
        assert not set(row["negative_questions"]) & set(row["positive_questions"])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"question": "q", "answer": ["a"], "answers": [{"passage_id": "1"}]', "not valid JSON"),
        ('{"answer": ["a"], "answers": [{"passage_id": "1"}]}', "'question' must be a non-empty string"),
        ('{"question": "q", "answer": [1], "answers": [{"passage_id": "1"}]}', "'answer' must be a string or a list"),
        ('{"question": "q", "answer": ["a"], "answers": [{"offset": 1}]}', "needs a 'passage_id'"),
        ('{"question": "q", "answer": ["a"]}', "'answers' must be a list"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: Path, bad: str, message: str) -> None:
    path = tmp_path / "paq.jsonl"
    path.write_text(_line("fine", ["a"], ["1"]) + "\n" + bad + "\n", encoding="utf-8")
    with pytest.raises(JsonFormatError, match=rf"paq\.jsonl:2: .*{message}"):
        sample_paq(path, tmp_path / "tmp")
