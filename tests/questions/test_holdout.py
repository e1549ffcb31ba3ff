"""Holding out training questions to tune on: deterministic, disjoint, complete, renamed copies."""

from __future__ import annotations

import pyarrow as pa
import pytest

from odqa.pipelines.questions.holdout import held_out, split_holdout
from odqa.pipelines.questions.rows import stable_id


def _questions(n: int, dataset: str = "squad") -> pa.Table:
    return pa.table({"question_id": [f"q{i}" for i in range(n)], "dataset": [dataset] * n, "split": ["train"] * n,
                     "question": [f"question {i}?" for i in range(n)],
                     "hard_negative_ids": [[f"p{i}"] for i in range(n)]})  # fmt: skip


def test_the_copies_partition_the_split_under_new_names_and_ids() -> None:
    parts = split_holdout(_questions(1000), "train-fit", "train-tune", 0.1, seed=3)
    assert 60 < parts.tune.num_rows < 140 and parts.fit.num_rows + parts.tune.num_rows == 1000
    assert set(parts.fit["split"].to_pylist()) == {"train-fit"} and set(parts.tune["split"].to_pylist()) == {"train-tune"}
    fit_q, tune_q = set(parts.fit["question"].to_pylist()), set(parts.tune["question"].to_pylist())
    assert not fit_q & tune_q and len(fit_q | tune_q) == 1000
    first = parts.fit.slice(0, 1).to_pylist()[0]
    original = f"q{first['question'].split()[1].rstrip('?')}"
    assert first["question_id"] == stable_id("squad", "train-fit", original)
    assert first["hard_negative_ids"] == [f"p{original[1:]}"]  # every other column copied as it was


def test_the_same_seed_holds_out_the_same_questions_whatever_the_order() -> None:
    table = _questions(300)
    one = split_holdout(table, "f", "t", 0.2, seed=0)
    shuffled = split_holdout(table.take(pa.array(list(range(299, -1, -1)))), "f", "t", 0.2, seed=0)
    assert sorted(one.tune["question"].to_pylist()) == sorted(shuffled.tune["question"].to_pylist())
    other = split_holdout(table, "f", "t", 0.2, seed=1)
    assert sorted(one.tune["question"].to_pylist()) != sorted(other.tune["question"].to_pylist())
    assert held_out("q1", 0.0, 0) is False


def test_nothing_held_out_at_zero_and_bad_fractions_refused() -> None:
    assert split_holdout(_questions(5), "f", "t", 0.0, seed=0).tune.num_rows == 0
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        split_holdout(_questions(5), "f", "t", 1.0, seed=0)
    with pytest.raises(ValueError, match="no question to tune on"):
        split_holdout(_questions(1), "f", "t", 0.01, seed=0)
    with pytest.raises(ValueError, match="one dataset split"):
        split_holdout(pa.concat_tables([_questions(2), _questions(2, "other")]), "f", "t", 0.5, seed=0)
