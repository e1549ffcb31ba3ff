"""A training whose loss or gradients stop being finite stops there, with its weights intact.

Without the check an update with nan gradients writes nan into every weight and into AdamW's
moments, every later loss is nan, and the run ends "done" with a model registered at a loss of
nan. A learning rate of 1e30 (a finite number the options accept) makes a real divergence:
the first update throws the weights to ~1e30, whose squares overflow float32 in LayerNorm.
"""

from __future__ import annotations

import math

import pytest
import torch

from odqa.models.base import WEIGHTS_NAME, load_weights
from odqa.models.data import MultiSetSampler
from odqa.models.retriever import create_retriever
from odqa.models.trainer import Trainer, TrainingConfig, make_optimizer, optimizer_step
from odqa.pipelines.dense.divergence import TrainingDiverged


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def test_a_diverging_run_stops_at_the_first_non_finite_step(tiny_checkpoint, toy_examples, tmp_path):
    torch.manual_seed(0)
    model = create_retriever("dpr", tiny_checkpoint)
    config = TrainingConfig(output_dir=str(tmp_path), batch_size=4, max_steps=6, lr=1e30, warmup_steps=0,
                            checkpoint_every=1, progress=False)  # fmt: skip
    trainer = Trainer(model, MultiSetSampler.single(toy_examples), config)
    with pytest.raises(TrainingDiverged, match=r"diverged at step (\d) of 6: the loss is (nan|inf)") as raised:
        trainer.train()
    message = str(raised.value)
    assert "Lower --lr (now 1e+30)" in message and "no model is registered" in message
    step = int(message.split("diverged at step ")[1].split()[0])
    assert step >= 2  # the first loss, from the starting weights, is finite
    # The diverging update was left out: the weights after the last applied one are finite, and
    # they are what the checkpoint of the step before holds.
    weights = _weights(model)
    assert all(torch.isfinite(t).all() for t in weights.values() if t.is_floating_point())
    saved = create_retriever("dpr", tiny_checkpoint)
    load_weights(saved, trainer.checkpoint_dir / WEIGHTS_NAME)
    for name, tensor in saved.state_dict().items():
        torch.testing.assert_close(tensor, weights[name], rtol=0, atol=0, msg=name)


def _nan_gradients(model: torch.nn.Module) -> None:
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, float("nan"))


@pytest.mark.parametrize("scaled", [False, True], ids=["full-precision", "fp16-loss-scaler"])
def test_an_update_with_non_finite_gradients_is_not_applied(tiny_checkpoint, scaled):
    model = create_retriever("dpr", tiny_checkpoint)
    optimizer = make_optimizer(model, 1e-3, 0.01, torch.device("cpu"))
    scaler = torch.amp.GradScaler("cpu", enabled=scaled)
    scaler.scale(torch.ones(()))  # (the scaler starts its scale on the first loss it scales)
    before, scale = _weights(model), scaler.get_scale()
    _nan_gradients(model)
    applied, norm = optimizer_step(optimizer, scaler, 1e-3, 2.0)
    assert not applied and math.isnan(norm)
    moments = [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    assert all(torch.isfinite(t).all() for t in moments)  # AdamW's moments took no nan
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, before[name], rtol=0, atol=0, msg=name)
    if scaled:
        assert scaler.get_scale() == scale / 2  # the scaler lowers its scale and tries again
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 1e-3)
    applied, norm = optimizer_step(optimizer, scaler, 1e-3, 2.0)
    assert applied and math.isfinite(norm) and optimizer.state


def test_a_non_finite_loss_leaves_the_update_out_even_with_finite_gradients(tiny_checkpoint):
    model = create_retriever("dpr", tiny_checkpoint)
    optimizer = make_optimizer(model, 1e-3, 0.0, torch.device("cpu"))
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 1e-3)
    applied, norm = optimizer_step(optimizer, torch.amp.GradScaler("cpu", enabled=False), 1e-3, 2.0,
                                   loss_finite=False)  # fmt: skip
    assert not applied and math.isfinite(norm) and not optimizer.state
