"""Layer-wise learning-rate decay (`--layer-decay`, TASER's reference configs): the factors equal
microsoft/taser's `get_layer_lrs`, and training with it moves the lower layers less."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from odqa.models.data import MultiSetSampler
from odqa.models.retriever import create_retriever
from odqa.models.trainer import Trainer, TrainingConfig, layer_lr_scale, make_optimizer, optimizer_step

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "taser_layer_lrs.json").read_text())

# Our parameter names for the reference's keys (a BERT-base TASER model).
OUR_NAMES = {
    "embeddings": "encoder.embeddings.word_embeddings.weight",
    "encoder.layer.0": "encoder.encoder.layer.0.attention.self.query.weight",
    "encoder.layer.5": "encoder.encoder.layer.5.output.experts.1.dense_in.weight",
    "encoder.layer.11": "encoder.encoder.layer.11.output.LayerNorm.bias",
    "encode_proj": "projection.weight",
}


@pytest.mark.parametrize("key", sorted(OUR_NAMES))
def test_factors_equal_the_reference_code(key):
    ours = layer_lr_scale(OUR_NAMES[key], FIXTURE["n_layers"], FIXTURE["layer_decay"])
    assert ours == pytest.approx(FIXTURE["factors"][key], rel=1e-12)


def test_optimizer_groups_carry_the_factors_into_the_learning_rate(tiny_checkpoint):
    model = create_retriever("taser", tiny_checkpoint)  # 3 blocks
    optimizer = make_optimizer(model, 1e-3, 0.0, torch.device("cpu"), layer_decay=0.5)
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)
    optimizer_step(optimizer, torch.amp.GradScaler("cpu", enabled=False), 1e-3, 0.0)
    rates = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    named = dict(model.named_parameters())
    assert rates[id(named["encoder.embeddings.word_embeddings.weight"])] == pytest.approx(1e-3 * 0.5**5)
    assert rates[id(named["encoder.encoder.layer.0.attention.self.query.weight"])] == pytest.approx(1e-3 * 0.5**4)
    assert rates[id(named["encoder.encoder.layer.2.output.experts.0.dense_in.weight"])] == pytest.approx(1e-3 * 0.5**2)
    plain = make_optimizer(model, 1e-3, 0.0, torch.device("cpu"))
    assert {group.get("lr_scale") for group in plain.param_groups} == {1.0}


def _embedding_change(checkpoint: str, examples, output: Path, layer_decay: float | None) -> float:
    torch.manual_seed(0)
    model = create_retriever("sde", checkpoint)
    before = model.question_tower.encoder.embeddings.word_embeddings.weight.detach().clone()
    config = TrainingConfig(output_dir=str(output), batch_size=4, max_steps=2, lr=1e-3, warmup_steps=0,
                            progress=False, layer_decay=layer_decay)  # fmt: skip
    Trainer(model, MultiSetSampler.single(examples), config).train()
    after = model.question_tower.encoder.embeddings.word_embeddings.weight.detach()
    return float((after - before).abs().max())


def test_training_with_decay_moves_the_embeddings_less(tiny_checkpoint, toy_examples, tmp_path):
    plain = _embedding_change(tiny_checkpoint, toy_examples, tmp_path / "plain", None)
    decayed = _embedding_change(tiny_checkpoint, toy_examples, tmp_path / "decayed", 0.5)
    # Adam's first steps move each weight by about lr: with decay 0.5 over 3 blocks, lr * 0.5**5.
    assert decayed == pytest.approx(plain * 0.5**5, rel=0.05)
