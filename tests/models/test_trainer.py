"""Trainer: overfitting a tiny set, exact resume, pickle-free checkpoints, best-checkpoint selection."""

from __future__ import annotations

import json

import pytest
import torch

from odqa.models.data import MultiSetSampler
from odqa.models.dev_eval import InMemoryDevEvaluator
from odqa.models.retriever import create_retriever, load_retriever
from odqa.models.trainer import Trainer, TrainingConfig, amp_dtype
from odqa.pipelines.cpu_features import cpu_has_bf16_units


def _losses(result) -> list[float]:
    state = json.loads((result.checkpoint_dir / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log"]]


def test_tiny_taser_overfits_a_tiny_set(tiny_checkpoint, toy_examples, tmp_path):
    torch.manual_seed(0)
    model = create_retriever("taser", tiny_checkpoint)
    config = TrainingConfig(
        output_dir=str(tmp_path),
        batch_size=8,
        max_steps=25,
        lr=1e-2,
        warmup_steps=0,
        progress=False,
    )
    result = Trainer(model, MultiSetSampler.single(toy_examples), config).train()
    losses = _losses(result)
    assert len(losses) == 25 and result.steps == 25
    assert sum(losses[-3:]) / 3 < 0.4 * losses[0]
    assert result.parameters == model.parameter_count() == result.trainable_parameters


def _resume_run(checkpoint: str, examples, output, stop_at=None, resume=False):
    torch.manual_seed(123)  # model construction (the seq router) must be the same in every run
    model = create_retriever("taser", checkpoint, routing="seq")
    config = TrainingConfig(
        output_dir=str(output),
        batch_size=3,
        hard_negatives=1,
        max_steps=6,
        accumulation_steps=2,
        lr=5e-3,
        warmup_steps=2,
        seed=11,
        progress=False,
    )
    data = MultiSetSampler([examples[:5], examples[5:]], [1.0, 2.0], seed=3)
    return model, Trainer(model, data, config).train(resume=resume, stop_at_step=stop_at)


def test_stop_and_resume_equals_training_straight_through(dropout_checkpoint, toy_examples, tmp_path):
    # Dropout and Gumbel-softmax routing both draw random numbers, so RNG state must resume too.
    straight, straight_result = _resume_run(dropout_checkpoint, toy_examples, tmp_path / "straight")
    _, first = _resume_run(dropout_checkpoint, toy_examples, tmp_path / "split", stop_at=3)
    assert first.steps == 3
    resumed, second = _resume_run(dropout_checkpoint, toy_examples, tmp_path / "split", resume=True)
    assert second.steps == 6
    expected = straight.state_dict()
    for name, tensor in resumed.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=1e-6, msg=name)
    assert _losses(second) == pytest.approx(_losses(straight_result), abs=1e-6)


def test_checkpoint_is_pickle_free_and_loadable(tiny_checkpoint, toy_examples, tmp_path):
    model = create_retriever("sde", tiny_checkpoint)
    config = TrainingConfig(output_dir=str(tmp_path), batch_size=4, max_steps=2, progress=False)
    result = Trainer(model, MultiSetSampler.single(toy_examples), config).train()
    names = sorted(p.name for p in result.checkpoint_dir.iterdir())
    assert names == sorted(
        [
            "config.json",
            "model.safetensors",
            "optimizer.safetensors",
            "rng.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "trainer_state.json",
        ]
    )
    loaded = load_retriever(result.checkpoint_dir)
    torch.testing.assert_close(loaded.state_dict(), model.state_dict())
    # Resuming with other settings is refused instead of silently continuing differently.
    other = TrainingConfig(output_dir=str(tmp_path), batch_size=2, max_steps=2, progress=False)
    with pytest.raises(ValueError, match="different settings"):
        Trainer(model, MultiSetSampler.single(toy_examples), other).train(resume=True)


def test_best_dev_checkpoint_is_kept(tiny_checkpoint, toy_examples, tmp_path):
    scores = iter([0.25, 0.75, 0.5])
    seen_steps = []

    def evaluator(retriever):
        seen_steps.append(retriever.config_fingerprint())
        return {"R@20": next(scores)}

    model = create_retriever("sde", tiny_checkpoint)
    config = TrainingConfig(
        output_dir=str(tmp_path), batch_size=4, max_steps=3, eval_every=1, lr=1e-3, progress=False
    )
    result = Trainer(model, MultiSetSampler.single(toy_examples), config, evaluator).train()
    assert result.best_step == 2 and result.best_metrics == {"R@20": 0.75}
    assert result.model_dir == tmp_path / "best"
    assert load_retriever(result.model_dir).config_fingerprint() == seen_steps[1]
    assert [h["step"] for h in result.dev_history] == [1, 2, 3]


def test_desire_me_training_leaves_the_base_untouched_and_learns_the_gate(
    tiny_checkpoint, toy_examples, tmp_path
):
    model = create_retriever(
        "desire-me", tiny_checkpoint, domains=["Culture", "Geography", "History", "Science"]
    )
    base_before = {k: v.clone() for k, v in model.base.state_dict().items()}
    gate_before = model.gate.layers[0].weight.clone()
    evaluator = InMemoryDevEvaluator(toy_examples, ks=(1, 5))
    config = TrainingConfig(
        output_dir=str(tmp_path), batch_size=4, max_steps=4, lr=1e-3, progress=False
    )
    result = Trainer(model, MultiSetSampler.single(toy_examples), config, evaluator).train()
    for name, tensor in model.base.state_dict().items():
        torch.testing.assert_close(tensor, base_before[name], rtol=0, atol=0)
    assert not torch.equal(model.gate.layers[0].weight, gate_before)
    assert set(result.best_metrics) == {"R@1", "R@5"}
    assert result.trainable_parameters < result.parameters


@pytest.mark.parametrize("objective", ["stopgrad", "flipped"])
def test_thesis_objectives_train(tiny_checkpoint, toy_examples, tmp_path, objective):
    model = create_retriever("sde", tiny_checkpoint)
    config = TrainingConfig(
        output_dir=str(tmp_path),
        batch_size=8,
        max_steps=8,
        lr=1e-2,
        warmup_steps=0,
        objective=objective,
        progress=False,
    )
    losses = _losses(Trainer(model, MultiSetSampler.single(toy_examples), config).train())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert min(losses[-3:]) < losses[0]


def test_amp_modes_per_device():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    # "auto" on CPU: bf16 where the CPU has bf16 units, else full precision (test_training_costs)
    assert amp_dtype("auto", cpu) is (torch.bfloat16 if cpu_has_bf16_units() else None)
    assert amp_dtype("none", cpu) is None and amp_dtype("none", cuda) is None
    assert amp_dtype("bf16", cpu) is torch.bfloat16
    assert amp_dtype("bf16", cuda) is torch.bfloat16
    with pytest.raises(ValueError, match="needs a CUDA device"):
        amp_dtype("fp16", cpu)


def _amp_run(checkpoint: str, examples, output, amp: str) -> tuple[list[float], dict]:
    torch.manual_seed(0)
    model = create_retriever("taser", checkpoint)
    config = TrainingConfig(
        output_dir=str(output),
        batch_size=4,
        hard_negatives=1,
        max_steps=4,
        lr=1e-2,
        warmup_steps=0,
        amp=amp,
        progress=False,
    )
    result = Trainer(model, MultiSetSampler.single(examples), config).train()
    return _losses(result), model.state_dict()


def test_bf16_autocast_trains_on_cpu_and_is_deterministic(dropout_checkpoint, toy_examples, tmp_path):
    losses, weights = _amp_run(dropout_checkpoint, toy_examples, tmp_path / "a", "bf16")
    again, weights_again = _amp_run(dropout_checkpoint, toy_examples, tmp_path / "b", "bf16")
    full, _ = _amp_run(dropout_checkpoint, toy_examples, tmp_path / "c", "none")
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    assert losses == again  # bf16 autocast on CPU is still bit-for-bit repeatable
    assert losses != full  # ...and really computes in bf16
    assert all(torch.equal(tensor, weights_again[name]) for name, tensor in weights.items())
    assert all(tensor.dtype == torch.float32 for tensor in weights.values())  # master weights stay fp32


def test_the_dev_evaluation_logs_what_it_encodes_and_what_it_got(tiny_checkpoint, toy_examples, caplog):
    """A run's log is not silent through a dev evaluation: a line when it starts (questions, pool)
    and one with its R@K when it ends, on the logger flows route into the run's logs."""
    from odqa.pipelines.progress import LOGGER_NAME

    evaluator = InMemoryDevEvaluator(toy_examples, ks=(1, 5))
    with caplog.at_level("INFO", logger=LOGGER_NAME):
        metrics = evaluator(create_retriever("sde", tiny_checkpoint))
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME and r.getMessage().startswith("dev eval")]
    assert lines[0] == (f"dev evaluation: encoding {len(toy_examples)} questions and a pool of "
                        f"{len(evaluator.passages)} passages (their positives and hard negatives)")  # fmt: skip
    assert lines[-1].startswith("dev evaluation done in ") and lines[-1].endswith(
        f"R@1 {metrics['R@1']:.4f}, R@5 {metrics['R@5']:.4f}")
