"""`--loss-weights SIM AUX`: DESIRE-ME's reference code trains on 0.5 * CE + 0.5 * BCE; the
weights scale each term of what is back-propagated."""

from __future__ import annotations

import pytest
import torch

from odqa.models.data import collate
from odqa.models.distributed import DistributedContext
from odqa.models.losses import objective
from odqa.models.retriever import create_retriever
from odqa.models.trainer import TrainingConfig, forward_backward

DOMAINS = ["Culture", "Geography", "History", "Science"]


def _step(model, examples, weights):
    """One forward/backward; returns the loss and the gate's and the specialisers' gradients."""
    model.zero_grad(set_to_none=True)
    batch = collate(model, examples[:4], 1, seed=0, domains=DOMAINS)
    loss, stats = forward_backward(model, batch, DistributedContext(), objective("contrastive"), 1.0, None,
                                   torch.amp.GradScaler("cpu", enabled=False), loss_weights=weights)  # fmt: skip
    gate = model.gate.layers[0].weight.grad.clone()
    specialisers = torch.cat([p.grad.reshape(-1) for p in model.specializers.parameters() if p.grad is not None])
    return loss, stats["domain_bce"], gate, specialisers


def test_weights_scale_each_term(tiny_checkpoint, toy_examples):
    torch.manual_seed(0)
    model = create_retriever("desire-me", tiny_checkpoint, domains=DOMAINS)
    model.train()
    loss, bce, gate, specialisers = _step(model, toy_examples, (1.0, 1.0))
    half_loss, _, half_gate, half_specialisers = _step(model, toy_examples, (0.5, 0.5))
    assert half_loss == pytest.approx(loss / 2, rel=1e-5)
    # The gate learns from the BCE only, the specialisers from the contrastive loss only (the
    # gate's weights are detached), so each gradient follows its own term's weight.
    torch.testing.assert_close(half_gate, gate / 2)
    torch.testing.assert_close(half_specialisers, specialisers / 2)
    ce_only, _, no_gate, same_specialisers = _step(model, toy_examples, (1.0, 0.0))
    assert ce_only == pytest.approx(loss - bce, rel=1e-5)
    assert float(no_gate.abs().max()) == 0.0
    torch.testing.assert_close(same_specialisers, specialisers)


def test_weights_are_checked():
    with pytest.raises(ValueError, match="loss_weights"):
        TrainingConfig(output_dir="x", max_steps=1, loss_weights=[0.5])
    with pytest.raises(ValueError, match="grad_cache"):
        TrainingConfig(output_dir="x", max_steps=1, loss_weights=[1, 1], grad_cache=True, bucket_tokens=64)
