"""Multi-set sampling and batch collation."""

from __future__ import annotations

from collections import Counter

import pytest

from odqa.models.data import MultiSetSampler, TrainingExample, collate
from odqa.models.retriever import create_retriever


def _examples(prefix: str, count: int) -> list[TrainingExample]:
    return [
        TrainingExample(
            f"{prefix} question {i}", (f"a{i}",), (f"T{i}", f"{prefix} text {i}"), question_id=f"{prefix}{i}"
        )
        for i in range(count)
    ]


def test_sampler_mixes_sets_by_weight_and_is_deterministic():
    big, small = _examples("big", 10), _examples("small", 4)
    sampler = MultiSetSampler([big, small], [1.0, 2.5], seed=7)
    assert sampler.epoch_size == 20
    order = sampler.epoch_order(0)
    counts = Counter(dataset for dataset, _ in order)
    assert counts == {0: 10, 1: 10}
    assert {i for d, i in order if d == 0} == set(range(10))
    small_uses = Counter(i for d, i in order if d == 1)
    assert set(small_uses) == set(range(4)) and min(small_uses.values()) >= 2
    assert order == MultiSetSampler([big, small], [1.0, 2.5], seed=7).epoch_order(0)
    assert order != sampler.epoch_order(1)
    assert order != MultiSetSampler([big, small], [1.0, 2.5], seed=8).epoch_order(0)
    assert len(MultiSetSampler([big], [0.5]).epoch_order(0)) == 5


def test_sampler_rejects_bad_input():
    with pytest.raises(ValueError, match="weight"):
        MultiSetSampler([_examples("a", 2)], [0.0])
    with pytest.raises(ValueError, match="no training examples"):
        MultiSetSampler([[]], names=["nq:train"])


def test_collate_puts_positives_first_then_hard_negatives(tiny_checkpoint, toy_examples):
    model = create_retriever("desire-me", tiny_checkpoint, domains=["Culture", "Science"])
    batch = collate(model, toy_examples[:3], hard_negatives=1, seed=0, domains=model.domains)
    assert batch.question_inputs["input_ids"].shape[0] == 3
    assert batch.passage_inputs["input_ids"].shape[0] == 6  # 3 positives + 1 hard negative each
    assert batch.positive_index.tolist() == [0, 1, 2]
    assert batch.domain_targets.tolist() == [[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]
    again = collate(model, toy_examples[:3], hard_negatives=1, seed=0, domains=model.domains)
    assert (again.passage_inputs["input_ids"] == batch.passage_inputs["input_ids"]).all()
    everything = collate(model, toy_examples[:3], hard_negatives=5, seed=0)
    assert everything.passage_inputs["input_ids"].shape[0] == 9  # only 2 available per question
