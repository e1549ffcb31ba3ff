"""Training reads its passages' token ids from the passage_tokens table: the same batches as
tokenizing at every step, tokenized once per tokenizer, and only rank 0 writes."""

from __future__ import annotations

import pytest
import torch

from odqa.models.data import TrainingExample, collate
from odqa.models.training_tokens import load_training_tokens
from tests.experiments.tiny_encoder import write_tiny_encoder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from odqa.models.retriever import create_retriever

    return create_retriever("dpr", write_tiny_encoder(tmp_path_factory.mktemp("tiny") / "m", layers=1))


def _examples(count: int) -> list[TrainingExample]:
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
    passage = lambda i: (f"Title {i}", " ".join(words[: 1 + (i * 5) % len(words)]) + f" number {i}")  # noqa: E731
    return [TrainingExample(question=f"question {i}?", answers=("x",), positive=passage(i),
                            hard_negatives=(passage(i + 100), passage(i + 200)), positive_id=f"p{i}",
                            hard_negative_ids=(f"p{i + 100}", f"p{i + 200}"))
            for i in range(count)]  # fmt: skip


def _same(a, b) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_batches_from_stored_ids_equal_tokenizing_and_a_second_training_tokenizes_none(tiny, workspace):
    examples = _examples(12)
    readonly = load_training_tokens(tiny, examples, workspace.root, write=False, workers=0)
    assert (readonly.tokenized, readonly.reused) == (36, 0)
    assert workspace.sql("SELECT count(*) AS n FROM passage_tokens").to_pylist() == [{"n": 0}]  # a reading rank adds nothing
    first = load_training_tokens(tiny, examples, workspace.root, workers=0)
    assert (first.tokenized, first.reused) == (36, 0)
    second = load_training_tokens(tiny, examples, workspace.root, workers=0)
    assert (second.tokenized, second.reused) == (0, 36)

    plain = collate(tiny, examples, hard_negatives=2, seed=3)
    stored = collate(tiny, examples, hard_negatives=2, seed=3, stored=second)
    _same(stored.passage_inputs, plain.passage_inputs)
    _same(stored.question_inputs, plain.question_inputs)
    assert torch.equal(stored.passage_keys, plain.passage_keys)
    bucketed_plain = collate(tiny, examples, hard_negatives=2, seed=3, bucket_tokens=64)
    bucketed_stored = collate(tiny, examples, hard_negatives=2, seed=3, bucket_tokens=64, stored=second)
    assert torch.equal(bucketed_stored.passage_inputs.rows, bucketed_plain.passage_inputs.rows)
    for got, want in zip(bucketed_stored.passage_inputs.chunks, bucketed_plain.passage_inputs.chunks, strict=True):
        _same(got, want)


def test_without_a_workspace_or_passage_ids_training_tokenizes_as_before(tiny, workspace):
    examples = _examples(3)
    assert load_training_tokens(tiny, examples, None) is None
    no_ids = [TrainingExample(question=e.question, answers=e.answers, positive=e.positive) for e in examples]
    assert load_training_tokens(tiny, no_ids, workspace.root) is None
