"""The trainer's cost bookkeeping and speed options: CPU time in the log, model snapshots for
quality-vs-cost curves, thread count, bf16 by default on CPUs with bf16 units, and exact resume
with buckets / cached gradients (older checkpoints without those settings still resume)."""

from __future__ import annotations

import json

import pytest
import torch

import odqa.models.trainer as trainer_module
from odqa.models.data import MultiSetSampler
from odqa.models.retriever import create_retriever, load_retriever
from odqa.models.trainer import (
    SNAPSHOT_FILE,
    Trainer,
    TrainingConfig,
    amp_dtype,
    changed_auto_precision,
    legacy_precision,
)
from odqa.pipelines.cpu_features import bf16_flags


def _config(output, **overrides) -> TrainingConfig:
    settings = dict(output_dir=str(output), batch_size=4, hard_negatives=1, max_steps=3, lr=1e-3,
                    warmup_steps=0, progress=False, amp="none")  # fmt: skip
    return TrainingConfig(**{**settings, **overrides})


def test_snapshots_keep_the_model_and_the_cost_of_every_nth_step(tiny_checkpoint, toy_examples, tmp_path):
    torch.manual_seed(0)
    model = create_retriever("sde", tiny_checkpoint)
    config = _config(tmp_path / "run", max_steps=4, snapshot_every=2, snapshot_dir=str(tmp_path / "snaps"))
    result = Trainer(model, MultiSetSampler.single(toy_examples), config).train()
    folders = sorted((tmp_path / "snaps").iterdir())
    assert [f.name for f in folders] == ["step-0000002", "step-0000004"]
    spent = [json.loads((f / SNAPSHOT_FILE).read_text()) for f in folders]
    assert [s["step"] for s in spent] == [2, 4] and [s["examples"] for s in spent] == [8, 16]
    assert 0 < spent[0]["cpu_s"] <= spent[1]["cpu_s"] <= result.cpu_s
    assert 0 < spent[0]["elapsed_s"] <= spent[1]["elapsed_s"] <= result.elapsed_s
    assert spent[0]["precision"] == "float32"
    last = load_retriever(folders[-1])
    torch.testing.assert_close(last.state_dict(), model.state_dict())
    assert [entry["step"] for entry in result.log] == [1, 2, 3, 4]
    cpu = [entry["cpu_s"] for entry in result.log]
    assert cpu == sorted(cpu) and cpu[-1] == pytest.approx(result.cpu_s)


def test_threads_apply_during_training_only(tiny_checkpoint, toy_examples, tmp_path):
    seen = []

    def evaluator(_retriever):
        seen.append(torch.get_num_threads())
        return {"R@20": 0.5}

    before = torch.get_num_threads()
    model = create_retriever("sde", tiny_checkpoint)
    Trainer(model, MultiSetSampler.single(toy_examples), _config(tmp_path, max_steps=1, threads=3), evaluator).train()
    assert seen == [3] and torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        _config(tmp_path, threads=0)


def test_auto_precision_is_bf16_only_on_cpus_with_bf16_units(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(trainer_module, "cpu_has_bf16_units", lambda: True)
    assert amp_dtype("auto", cpu) is torch.bfloat16 and amp_dtype("none", cpu) is None
    assert changed_auto_precision("auto", "cpu") == "bfloat16"  # enters the stage fingerprint
    assert changed_auto_precision("bf16", "cpu") is None and changed_auto_precision("none", "cpu") is None
    monkeypatch.setattr(trainer_module, "cpu_has_bf16_units", lambda: False)
    assert amp_dtype("auto", cpu) is None
    assert changed_auto_precision("auto", "cpu") is None  # same arithmetic as before: same fingerprint
    assert legacy_precision({"amp": "auto"}, cpu) == "float32" and legacy_precision({"amp": "bf16"}, cpu) == "bfloat16"


def test_bf16_flags_are_read_from_cpuinfo():
    x86 = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_tile\n"
    assert bf16_flags(x86) == {"avx512_bf16"}
    assert bf16_flags("Features\t: fp asimd bf16 i8mm\n") == {"bf16"}
    assert bf16_flags("flags\t\t: fpu sse avx2 avx512f\n") == set()


def _bucketed_run(checkpoint, examples, output, stop_at=None, resume=False):
    torch.manual_seed(5)
    model = create_retriever("dpr", checkpoint)
    config = _config(output, batch_size=3, max_steps=6, seed=2, bucket_tokens=48, grad_cache=True)
    return model, Trainer(model, MultiSetSampler.single(examples), config).train(resume=resume, stop_at_step=stop_at)


def test_cached_gradient_training_resumes_exactly(dropout_checkpoint, toy_examples, tmp_path):
    straight, straight_result = _bucketed_run(dropout_checkpoint, toy_examples, tmp_path / "straight")
    _bucketed_run(dropout_checkpoint, toy_examples, tmp_path / "split", stop_at=3)
    resumed, second = _bucketed_run(dropout_checkpoint, toy_examples, tmp_path / "split", resume=True)
    assert second.steps == 6 and second.cpu_s > 0
    expected = straight.state_dict()
    for name, tensor in resumed.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=1e-6, msg=name)
    # The checkpoint says how it was computed: another bucket size may not continue it.
    torch.manual_seed(5)
    other = _config(tmp_path / "split", batch_size=3, max_steps=6, seed=2, bucket_tokens=64, grad_cache=True)
    with pytest.raises(ValueError, match="different settings"):
        Trainer(create_retriever("dpr", dropout_checkpoint), MultiSetSampler.single(toy_examples), other).train(
            resume=True
        )


def _make_legacy(checkpoint_dir, amp: str) -> None:
    """Rewrite a checkpoint's state as the trainer wrote it before buckets, cached gradients and
    the precision entered the resume signature."""
    path = checkpoint_dir / "trainer_state.json"
    state = json.loads(path.read_text())
    for key in ("bucket_tokens", "grad_cache"):
        del state["signature"]["training"][key]
    del state["signature"]["precision"]
    state["config"]["amp"] = amp
    path.write_text(json.dumps(state))


def test_a_checkpoint_written_before_the_new_settings_still_resumes(
    tiny_checkpoint, toy_examples, tmp_path, monkeypatch
):
    data = MultiSetSampler.single(toy_examples)
    # Written before buckets existed, so without them; today's default settings continue it with
    # the checkpoint's own (what the train flow does through `TrainSettings.continuing`).
    first = Trainer(create_retriever("sde", tiny_checkpoint), data, _config(tmp_path, max_steps=4, bucket_tokens=None))
    stopped = first.train(stop_at_step=2).checkpoint_dir
    _make_legacy(stopped, amp="none")
    now = _config(tmp_path, max_steps=4)
    with pytest.raises(ValueError, match="different settings"):  # buckets would not continue it exactly
        Trainer(create_retriever("sde", tiny_checkpoint), data, now).train(resume=True)
    continuing, kept = now.continuing(json.loads((stopped / "trainer_state.json").read_text())["config"])
    assert kept == ["bucket_tokens"] and continuing.bucket_tokens is None
    resumed = Trainer(create_retriever("sde", tiny_checkpoint), data, continuing)
    assert resumed.train(resume=True).steps == 4

    # An old "auto" checkpoint computed in fp32 on CPU; where "auto" now means bf16 it cannot
    # continue exactly, and says so instead of silently mixing the two.
    monkeypatch.setattr(trainer_module, "cpu_has_bf16_units", lambda: True)
    auto = _config(tmp_path / "auto", max_steps=4, amp="auto", bucket_tokens=None)
    stopped = Trainer(create_retriever("sde", tiny_checkpoint), data, auto).train(stop_at_step=2)
    _make_legacy(stopped.checkpoint_dir, amp="auto")
    with pytest.raises(ValueError, match="different settings"):
        Trainer(create_retriever("sde", tiny_checkpoint), data, auto).train(resume=True)
