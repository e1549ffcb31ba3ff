"""Training steps on a CUDA device for every architecture, in fp16 (with a loss scaler) and bf16.

Each run goes through `models.trainer.Trainer` itself (autocast, GradScaler, fused AdamW on
CUDA, checkpoint writing), then the trained model is saved, loaded back on the GPU and must
give the same vectors; a stopped fp16 run must resume from its checkpoint with its loss scale.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from odqa.models.data import MultiSetSampler
from odqa.models.retriever import create_retriever, load_retriever
from odqa.models.trainer import Trainer, TrainingConfig

from .conftest import requires_cuda

pytestmark = requires_cuda

ARCHS = [
    ("dpr", {}),
    ("ade", {}),
    ("sde", {}),
    ("ade-ste", {}),
    ("ade-fte", {}),
    ("ade-spl", {"projection_dim": 24}),
    ("taser", {}),
    ("taser", {"routing": "seq", "num_experts": 3}),
    ("taser", {"routing": "tok"}),
    ("taser-shared", {}),
    ("desire-me", {"domains": ["Culture", "Geography", "History", "Science"]}),
    ("rnd-g", {"domains": ["Culture", "Geography", "History", "Science"]}),
]
IDS = [f"{arch}-{options.get('routing', '')}".rstrip("-") for arch, options in ARCHS]
QUESTIONS = ["who wrote hamlet", "what is the capital of france"]
TITLES = ["Hamlet", "Paris"]
TEXTS = ["Hamlet is a tragedy by William Shakespeare.", "Paris is the capital of France."]


def _config(tmp_path, amp: str, steps: int) -> TrainingConfig:
    return TrainingConfig(output_dir=str(tmp_path / "run"), batch_size=4, hard_negatives=1, max_steps=steps,
                          lr=1e-3, warmup_steps=0, amp=amp, device="cuda",
                          progress=False, checkpoint_minutes=None)  # fmt: skip


def _trainable(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().float().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
@pytest.mark.parametrize(("arch", "options"), ARCHS, ids=IDS)
def test_training_steps_then_save_and_load(tiny_checkpoint, toy_examples, tmp_path, arch, options, amp):
    torch.manual_seed(0)
    model = create_retriever(arch, tiny_checkpoint, **options)
    before = _trainable(model)
    result = Trainer(model, MultiSetSampler.single(toy_examples), _config(tmp_path, amp, steps=6)).train()

    assert result.steps == 6
    assert next(model.parameters()).device.type == "cuda"
    state = json.loads((result.checkpoint_dir / "trainer_state.json").read_text())
    assert state["precision"] == {"fp16": "float16", "bf16": "bfloat16"}[amp]
    assert all(math.isfinite(entry["loss"]) for entry in state["log"])
    # Master weights stay float32 under autocast, and the updates reached them (with fp16 the
    # scaler may skip a first step whose scaled gradients overflowed, never all six).
    assert all(p.dtype == torch.float32 for p in model.parameters())
    after = _trainable(model)
    assert all(torch.isfinite(t).all() for t in after.values())
    assert any(not torch.equal(before[name], after[name]) for name in before)
    if amp == "fp16":
        assert 0 < state["scaler"]["scale"] <= 65536.0

    folder = model.save_pretrained(tmp_path / "saved")
    loaded = load_retriever(folder).to("cuda")
    model.eval()
    for name, value in _trainable(loaded).items():
        torch.testing.assert_close(value, after[name], rtol=0, atol=0, msg=name)
    np.testing.assert_array_equal(loaded.encode_questions(QUESTIONS, show_progress=False),
                                  model.encode_questions(QUESTIONS, show_progress=False))  # fmt: skip
    np.testing.assert_array_equal(loaded.encode_passages(TITLES, TEXTS, show_progress=False),
                                  model.encode_passages(TITLES, TEXTS, show_progress=False))  # fmt: skip


def test_fp16_run_resumes_with_its_loss_scale(tiny_checkpoint, toy_examples, tmp_path):
    def run(output, stop_at=None, resume=False) -> dict:
        torch.manual_seed(0)
        model = create_retriever("taser", tiny_checkpoint, routing="seq")
        trainer = Trainer(model, MultiSetSampler.single(toy_examples), _config(output, "fp16", steps=6))
        result = trainer.train(resume=resume, stop_at_step=stop_at)
        return json.loads((result.checkpoint_dir / "trainer_state.json").read_text())

    straight = run(tmp_path / "straight")
    first = run(tmp_path / "split", stop_at=3)
    assert first["step"] == 3 and first["scaler"]["scale"] > 0
    resumed = run(tmp_path / "split", resume=True)
    assert [entry["step"] for entry in resumed["log"]] == [1, 2, 3, 4, 5, 6]
    # CUDA kernels may sum in another order from run to run, so the losses match to rounding,
    # and the loss scale (which a skipped or unrestored step would change) matches exactly.
    assert [e["loss"] for e in resumed["log"]] == pytest.approx(
        [e["loss"] for e in straight["log"]], rel=1e-2
    )
    assert resumed["scaler"] == straight["scaler"]
