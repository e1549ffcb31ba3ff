"""Hard-negative mining: never gold, never answer-bearing; TASER's round logic."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from odqa.pipelines.dense.mining import mine_hard_negatives, round_negatives, union_negatives
from odqa.pipelines.evaluation.answers import has_answer

CITIES = ["Lisbon", "Porto", "Oslo", "Bergen", "Quito", "Lima"]


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(11)
    texts = {}
    for i in range(300):
        words = ["the", "river", "valley", "in", "spring", "museum", "of", "art"]
        text = " ".join(rng.choice(words, size=12))
        if rng.random() < 0.3:
            text += f" near {rng.choice(CITIES)}"
        texts[f"p{i}"] = text
    qids = [f"q{i}" for i in range(40)]
    answers = [[str(rng.choice(CITIES))] for _ in qids]
    gold = [[f"p{j}" for j in rng.choice(300, size=2, replace=False)] for _ in qids]
    questions = pa.table({"question_id": qids, "answers": answers, "positive_ids": gold})
    rows = []
    for qid, g in zip(qids, gold, strict=True):
        retrieved = list(rng.choice(300, size=50, replace=False))
        pids = [f"p{j}" for j in retrieved]
        pids[rng.integers(0, 10)] = g[0]  # the gold passage is retrieved high
        for rank, pid in enumerate(dict.fromkeys(pids), start=1):
            rows.append((qid, pid, rank))
    q, p, r = zip(*rows, strict=True)
    run = pa.table({"question_id": q, "passage_id": p, "rank": pa.array(r, pa.int32())})
    return texts, questions, run


def test_negatives_exclude_gold_and_answer_bearing(world):
    texts, questions, run = world
    result = mine_hard_negatives(run, questions, texts, num_negatives=None, depth=100)
    answers = dict(zip(questions["question_id"].to_pylist(), questions["answers"].to_pylist(), strict=True))
    gold = dict(zip(questions["question_id"].to_pylist(), questions["positive_ids"].to_pylist(), strict=True))
    ranked = {}
    for row in run.to_pylist():
        ranked.setdefault(row["question_id"], []).append((row["rank"], row["passage_id"]))
    total_kept = 0
    for qid, negs in zip(result.negatives["question_id"].to_pylist(), result.negatives["hard_negative_ids"].to_pylist(), strict=True):
        assert not set(negs) & set(gold[qid])
        assert not any(has_answer(texts[p], answers[qid]) for p in negs)
        expected = [p for _, p in sorted(ranked[qid]) if p not in gold[qid] and not has_answer(texts[p], answers[qid])]
        assert negs == expected  # everything else kept, in rank order
        total_kept += len(negs)
    assert result.excluded_gold >= 40 and result.excluded_answer > 0
    assert total_kept + result.excluded_gold + result.excluded_answer == run.num_rows


def test_top_n_and_depth(world):
    texts, questions, run = world
    few = mine_hard_negatives(run, questions, texts, num_negatives=3)
    full = mine_hard_negatives(run, questions, texts)
    for a, b in zip(few.negatives["hard_negative_ids"].to_pylist(), full.negatives["hard_negative_ids"].to_pylist(), strict=True):
        assert a == b[:3]
    shallow = mine_hard_negatives(run, questions, texts, depth=5)
    assert all(len(n) <= 5 for n in shallow.negatives["hard_negative_ids"].to_pylist())


def test_unknown_questions_are_counted_and_nulls_tolerated(world):
    texts, _, _ = world
    questions = pa.table({"question_id": ["a"], "answers": pa.array([None], pa.list_(pa.string())),
                          "positive_ids": pa.array([None], pa.list_(pa.string()))})
    run = pa.table({"question_id": ["a", "a", "zz"], "passage_id": ["p1", "p2", "p3"], "score": [2.0, 3.0, 1.0]})
    result = mine_hard_negatives(run, questions, texts)
    assert result.unknown_questions == 1
    assert result.negatives.to_pylist() == [{"question_id": "a", "hard_negative_ids": ["p2", "p1"]}]


def test_round_logic_single_and_multi_set():
    p1 = pa.table({"question_id": ["a", "b"], "hard_negative_ids": [["x"], ["y"]]})
    p2 = pa.table({"question_id": ["a", "c"], "hard_negative_ids": [["z", "x", "w"], ["v"]]})
    assert round_negatives(1, "single-set", p1) is p1
    assert round_negatives(2, "multi-set", p1, p2) is p2
    single = round_negatives(2, "single-set", p1, p2).to_pylist()
    assert single == [{"question_id": "a", "hard_negative_ids": ["x", "z", "w"]},
                      {"question_id": "b", "hard_negative_ids": ["y"]},
                      {"question_id": "c", "hard_negative_ids": ["v"]}]
    assert union_negatives(p1, p2).num_rows == 3
    with pytest.raises(ValueError, match="round 2 needs negatives mined with the round 1 model"):
        round_negatives(2, "single-set", p1)
    with pytest.raises(ValueError, match="training mode must be one of"):
        round_negatives(2, "both", p1, p2)
