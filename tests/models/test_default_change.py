"""A changed default (length buckets, `TrainSettings.earlier_defaults`) retrains nothing: a model
trained with buckets asked for before they were the default, and re-asked the same way, is a
no-op; turning buckets off is a new training."""

from __future__ import annotations

from odqa.flows.stages.train import train_params, train_stage
from odqa.models.settings import RetrieverSettings, TrainSettings
from odqa.storage import Workspace
from odqa.storage.fingerprint import fingerprint
from odqa.storage.model_registry import model_identity, resolve_model

from .filled_workspace import fill_workspace


def test_a_model_trained_with_buckets_before_they_were_the_default_stays_current(cli, tiny_checkpoint, tmp_path):
    root = tmp_path / "ws"
    fill_workspace(root)
    args = ["--workspace", str(root), "train", "--arch", "sde", "--base", tiny_checkpoint, "--train", "toy:train",
            "--model-id", "m", "--max-steps", "2", "--batch-size", "3", "--bucket-tokens", "2048"]  # fmt: skip
    assert "train m: done" in cli(*args).output
    ws = Workspace.resolve(root)
    stage = train_stage("m")
    record = ws.stage_record(stage)
    # The ledger as the code before the change wrote it: 2048 then differed from the default (none).
    settings = RetrieverSettings(arch="sde", base=tiny_checkpoint), TrainSettings(max_steps=2, batch_size=3)
    inputs = (model_identity(resolve_model(ws, tiny_checkpoint).path), ws.table_version("questions"),
              ws.table_version("passages"))  # fmt: skip
    then = fingerprint(stage, train_params(*settings, ["toy:train"], None, 1, earlier=True), *inputs)
    assert then != record.fingerprint
    with ws.transaction(stage, fingerprint=then) as tx:
        tx.report = record.report
    weights = (ws.models_dir / "m" / "model.safetensors").stat().st_mtime_ns

    again = cli(*args)
    assert "no-op" in again.output
    assert (ws.models_dir / "m" / "model.safetensors").stat().st_mtime_ns == weights
    assert cli(*args[:-2]).output.count("no-op") == 1  # the default is the same buckets: still current

    off = cli(*args[:-1], "none")  # one padded block is another training
    assert "no-op" not in off.output and "train m: done" in off.output
    assert ws.stage_record(stage).fingerprint not in (then, record.fingerprint)
