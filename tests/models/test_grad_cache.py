"""Cached-gradient (GradCache) steps: the loss and weight gradients of a plain step, a graph
over one bucket at a time, and clear refusals where the trick does not apply."""

from __future__ import annotations

import pytest
import torch

from odqa.models.data import MultiSetSampler, collate
from odqa.models.distributed import DistributedContext
from odqa.models.grad_cache import cached_forward_backward, supports_grad_cache
from odqa.models.losses import contrastive_loss, duplicate_positive_mask
from odqa.models.retriever import create_retriever
from odqa.models.trainer import Trainer, TrainingConfig, forward_backward

CPU = DistributedContext(0, 1, 0, torch.device("cpu"))


def _gradients(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch", ["sde", "dpr", "taser"])
def test_cached_step_matches_a_plain_step_with_dropout(arch, dropout_checkpoint, toy_examples):
    torch.manual_seed(0)
    model = create_retriever(arch, dropout_checkpoint).train()
    batch = collate(model, toy_examples, hard_negatives=2, seed=5, bucket_tokens=40, bucket_questions=True)
    assert len(batch.passage_inputs.chunks) > 2
    scaler = torch.amp.GradScaler("cuda", enabled=False)

    torch.manual_seed(7)  # the same dropout draws for both, bucket by bucket
    plain_loss, _ = forward_backward(model, batch, CPU, contrastive_loss, 0.05, None, scaler)
    plain = _gradients(model)
    state_after_plain = torch.get_rng_state()
    model.zero_grad(set_to_none=True)

    torch.manual_seed(7)
    cached_loss, _ = cached_forward_backward(model, batch, CPU.device, contrastive_loss, 0.05, None, scaler)
    cached = _gradients(model)
    assert torch.equal(torch.get_rng_state(), state_after_plain)  # later draws continue alike
    assert cached_loss == pytest.approx(plain_loss, rel=1e-5)
    assert cached.keys() == plain.keys() and plain
    scale = max(float(g.abs().max()) for g in plain.values())  # float rounding, relative to the largest
    for name, gradient in plain.items():
        difference = float((cached[name] - gradient).abs().max())
        assert difference <= 1e-6 * scale + 1e-4 * float(gradient.abs().max()), (name, difference, scale)


def test_cached_step_builds_a_graph_over_one_bucket_at_a_time(tiny_checkpoint, toy_examples):
    model = create_retriever("sde", tiny_checkpoint).train()
    batch = collate(model, toy_examples, hard_negatives=2, seed=5, bucket_tokens=40, bucket_questions=True)
    rows_with_graph = []
    encode = model.embed_passages

    def recording(inputs):
        if torch.is_grad_enabled():
            rows_with_graph.append(inputs["input_ids"].shape[0])
        return encode(inputs)

    model.embed_passages = recording
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    cached_forward_backward(model, batch, CPU.device, contrastive_loss, 0.05, None, scaler)
    assert rows_with_graph == [c["input_ids"].shape[0] for c in batch.passage_inputs.chunks]
    assert max(rows_with_graph) < len(batch.passage_inputs)


def test_grad_cache_is_refused_where_a_batch_wide_auxiliary_loss_exists(tiny_checkpoint, toy_examples, tmp_path):
    assert supports_grad_cache(create_retriever("ade-spl", tiny_checkpoint))
    assert supports_grad_cache(create_retriever("taser", tiny_checkpoint, routing="det"))
    seq = create_retriever("taser", tiny_checkpoint, routing="seq")
    assert not supports_grad_cache(seq)
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=1, bucket_tokens=64, grad_cache=True)
    with pytest.raises(ValueError, match="auxiliary loss"):
        Trainer(seq, MultiSetSampler.single(toy_examples), config)
    with pytest.raises(ValueError, match="bucket_tokens"):
        TrainingConfig(output_dir=str(tmp_path), max_steps=1, grad_cache=True, bucket_tokens=None)


def test_training_with_grad_cache_learns(tiny_checkpoint, toy_examples, tmp_path):
    torch.manual_seed(0)
    model = create_retriever("sde", tiny_checkpoint)
    config = TrainingConfig(output_dir=str(tmp_path), batch_size=8, max_steps=12, lr=1e-2,
                            warmup_steps=0, progress=False, bucket_tokens=48, grad_cache=True)  # fmt: skip
    result = Trainer(model, MultiSetSampler.single(toy_examples), config).train()
    losses = [entry["loss"] for entry in result.log]
    assert len(losses) == 12 and sum(losses[-3:]) / 3 < 0.5 * losses[0]


def test_masking_duplicate_positives_works_in_both_steps(tiny_checkpoint, toy_examples):
    from dataclasses import replace

    # A second question on the first paragraph: without masking, each is the other's negative.
    examples = [*toy_examples[:4], replace(toy_examples[0], question="Who is the author of Hamlet?")]
    model = create_retriever("sde", tiny_checkpoint).train()
    batch = collate(model, examples, hard_negatives=1, seed=5, bucket_tokens=40, bucket_questions=True)
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    losses = {}
    for mask in (False, True):
        model.zero_grad(set_to_none=True)
        losses["plain", mask] = forward_backward(model, batch, CPU, contrastive_loss, 0.05, None, scaler,
                                                 mask_duplicates=mask)[0]  # fmt: skip
        model.zero_grad(set_to_none=True)
        exclude = duplicate_positive_mask(batch.passage_keys, batch.positive_index) if mask else None
        losses["cached", mask] = cached_forward_backward(model, batch, CPU.device, contrastive_loss, 0.05, None,
                                                         scaler, exclude=exclude)[0]  # fmt: skip
    assert losses["plain", True] == pytest.approx(losses["cached", True], rel=1e-5)
    assert losses["plain", True] < losses["plain", False]  # the duplicate no longer competes
