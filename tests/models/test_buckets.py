"""Length bucketing inside a micro-batch: same vectors in batch order, less padding."""

from __future__ import annotations

import pytest
import torch

from odqa.models.buckets import Buckets, bucket_sizes
from odqa.models.data import collate
from odqa.models.retriever import create_retriever


def test_bucket_sizes_fill_each_bucket_up_to_the_token_budget():
    assert bucket_sizes([10, 8, 8, 5, 2], max_tokens=20) == [2, 2, 1]  # widths 10, 8, 2
    assert bucket_sizes([300, 10], max_tokens=100) == [1, 1]  # a row longer than the budget goes alone
    assert bucket_sizes([], max_tokens=8) == []
    with pytest.raises(ValueError, match="max_tokens"):
        bucket_sizes([3], max_tokens=0)


def test_buckets_pad_less_and_give_the_vectors_of_one_padded_block(tiny_checkpoint, toy_examples):
    torch.manual_seed(0)
    model = create_retriever("sde", tiny_checkpoint).eval()
    plain = collate(model, toy_examples, hard_negatives=2, seed=3)
    bucketed = collate(model, toy_examples, hard_negatives=2, seed=3, bucket_tokens=64, bucket_questions=True)
    assert isinstance(bucketed.passage_inputs, Buckets) and isinstance(bucketed.question_inputs, Buckets)
    assert len(bucketed.passage_inputs.chunks) > 1
    assert bucketed.passage_inputs.padded_tokens() < plain.passage_inputs["input_ids"].numel()
    assert sorted(bucketed.passage_inputs.rows.tolist()) == list(range(len(toy_examples) * 3))
    with torch.no_grad():
        expected = model(plain.question_inputs, plain.passage_inputs)
        got = model(bucketed.question_inputs, bucketed.passage_inputs)
    torch.testing.assert_close(got.passages, expected.passages, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.questions, expected.questions, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("arch", ["taser", "desire-me"])
def test_bucketed_passages_work_for_taser_and_desire_me(arch, tiny_checkpoint, toy_examples):
    torch.manual_seed(0)
    options = {"domains": ["Culture", "Science"]} if arch == "desire-me" else {"routing": "tok"}
    model = create_retriever(arch, tiny_checkpoint, **options).eval()
    domains = options.get("domains")
    plain = collate(model, toy_examples, hard_negatives=1, seed=1, domains=domains)
    bucketed = collate(model, toy_examples, hard_negatives=1, seed=1, domains=domains, bucket_tokens=48)
    targets = plain.domain_targets
    with torch.no_grad():
        expected = model(plain.question_inputs, plain.passage_inputs, targets)
        got = model(bucketed.question_inputs, bucketed.passage_inputs, targets)
    torch.testing.assert_close(got.passages, expected.passages, rtol=1e-4, atol=1e-5)
