"""`odqa train` through the CLI and Prefect flow: examples from the workspace, `models` row, no-op."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odqa.models.retriever import load_retriever
from odqa.storage import Workspace
from tests.models.filled_workspace import fill_workspace
from tests.models.switched_options import switched_on

from .conftest import TOY_FACTS


def test_train_registers_model_and_reruns_as_noop(cli, tiny_checkpoint, tmp_path):
    root = tmp_path / "ws"
    fill_workspace(root)
    args = [
        "--workspace",
        str(root),
        "train",
        "--arch",
        "taser",
        "--base",
        tiny_checkpoint,
        "--train",
        "toy:train",
        "--dev",
        "toy:dev",
        "--model-id",
        "taser-toy",
        "--max-steps",
        "2",
        "--batch-size",
        "3",
        "--lr",
        "1e-3",
    ]
    first = cli(*args)
    assert "train taser-toy: done" in first.output
    dev = len(TOY_FACTS) - 6
    lines = [line.strip() for line in first.output.splitlines()]
    assert [line.split(":")[0] for line in lines if line.startswith("dev R@")] == ["dev R@1", "dev R@5", "dev R@20",
                                                                                 "dev R@100"]  # fmt: skip
    assert (f"dev_pool: {2 * dev} passages: the positives and hard negatives of the {dev} questions of toy:dev "
            "(not the full corpus") in first.output  # fmt: skip
    assert "hard_negatives: 1.00 per question on average (asked: 1); 6 of 6 training questions" in first.output
    assert "None" not in first.output
    ws = Workspace.resolve(root)
    rows = ws.sql("SELECT model_id, arch, parameters, path, base, trained_on, config FROM models").to_pylist()
    assert len(rows) == 1
    row = rows[0]
    assert (row["model_id"], row["arch"], row["base"], row["trained_on"]) == (
        "taser-toy",
        "taser",
        tiny_checkpoint,
        "toy:train:1",
    )
    model = load_retriever(row["path"])
    assert row["parameters"] == model.parameter_count()
    assert sorted(p.name for p in Path(row["path"]).iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    config = json.loads(row["config"])
    assert config["retriever"]["taser"]["specialized_layers"] == [2]
    assert set(config["dev"]["metrics"]) == {"R@1", "R@5", "R@20", "R@100"}
    assert config["data"]["toy:train"]["skipped"] == {
        "question_without_known_positive": 1,
        "unknown_hard_negative": 6,
    }
    assert config["steps"] == 2
    assert not (ws.models_dir / ".training" / "taser-toy").exists()

    again = cli(*args)
    assert "no-op" in again.output
    assert ws.sql("SELECT count(*) AS n FROM models").to_pylist() == [{"n": 1}]


def test_hard_negatives_asked_for_are_built_with_bm25_or_refused(cli, tiny_checkpoint, tmp_path):
    """`--hard-negatives 1` (the default) on questions without any: BM25 negatives are built first,
    as DPR does; with no BM25 index to build them from, the training is refused naming the commands."""
    from odqa.flows.stages.bm25 import build_bm25_task
    from odqa.pipelines.retrieval.java import JavaMissingError, check_java
    from odqa.storage.passages import require_passages

    root = tmp_path / "ws"
    fill_workspace(root, negatives=False)
    args = ["--workspace", str(root), "train", "--arch", "sde", "--base", tiny_checkpoint, "--train", "toy:train",
            "--model-id", "sde-toy", "--max-steps", "1", "--batch-size", "3"]  # fmt: skip
    refused = cli(*args, ok=False)
    assert refused.exit_code == 1 and "no BM25 index to build them from: run `odqa bm25 index`" in refused.output
    assert "odqa negatives bm25 --dataset toy --split train --count 1" in refused.output
    assert "in-batch negatives only" in cli(*args, "--hard-negatives", "0", "--model-id", "plain").output
    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"BM25 negatives need a JDK: {error}")
    ws = Workspace.resolve(root)
    build_bm25_task.fn(str(root), require_passages(ws), 1)
    trained = cli(*args).output
    assert "no question has hard negatives and 1 per question were asked for; building BM25 negatives" in trained
    assert "hard_negatives: 1.00 per question on average (asked: 1); 6 of 6 training questions" in trained
    stored = ws.sql("SELECT hard_negative_ids FROM questions WHERE split = 'train' AND question_id <> 'toy-x'")
    assert all(len(ids) == 1 for ids in stored.column("hard_negative_ids").to_pylist())


def test_desire_me_on_a_registered_model_uses_question_domains(cli, tiny_checkpoint, tmp_path):
    root = tmp_path / "ws"
    fill_workspace(root)
    common = [
        "--workspace",
        str(root),
        "train",
        "--train",
        "toy:train",
        "--max-steps",
        "1",
        "--batch-size",
        "3",
    ]
    cli(*common, "--arch", "sde", "--base", tiny_checkpoint, "--model-id", "base")
    cli(*common, "--arch", "desire-me", "--base", "base", "--model-id", "dme")
    ws = Workspace.resolve(root)
    model = load_retriever(ws.models_dir / "dme")
    assert model.domains == ["Culture", "Geography", "Science"]  # the train split's labels
    base = load_retriever(ws.models_dir / "base")
    titles, texts = ["Paris"], ["Paris is the capital of France."]
    assert (model.encode_passages(titles, texts) == base.encode_passages(titles, texts)).all()
    arches = ws.sql("SELECT model_id, arch FROM models ORDER BY model_id").to_pylist()
    assert arches == [{"model_id": "base", "arch": "sde"}, {"model_id": "dme", "arch": "desire-me"}]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--train", "toy"], "must look like NAME:SPLIT or NAME:SPLIT:WEIGHT"),
        (["--train", "toy:test"], "no questions for dataset 'toy' split 'test'; known: toy/dev, toy/train"),
    ],
)
def test_bad_training_input_gives_a_clear_error(cli, tiny_checkpoint, tmp_path, extra, message):
    root = tmp_path / "ws"
    fill_workspace(root)
    result = cli(
        "--workspace",
        str(root),
        "train",
        "--arch",
        "sde",
        "--base",
        tiny_checkpoint,
        "--model-id",
        "m",
        "--max-steps",
        "1",
        *extra,
        ok=False,
    )
    assert result.exit_code == 1
    assert message in result.output


def test_torchrun_ranks_report_progress_to_the_flow_run(prefect_harness, tiny_checkpoint, tmp_path, monkeypatch):
    """Two CPU ranks under torchrun (child processes without Prefect context): rank 0's progress
    reaches the flow run's logs through the API; rank 1 reports nothing."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    from odqa.flows.stages.train import train_flow

    root = tmp_path / "ws"
    fill_workspace(root)
    monkeypatch.setenv("ODQA_PROGRESS", "log")
    monkeypatch.setenv("ODQA_PROGRESS_INTERVAL", "0")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    state = train_flow(retriever={"arch": "sde", "base": tiny_checkpoint}, training={"max_steps": 2, "batch_size": 1},
                       train=["toy:train"], model_id="ddp", gpus=2, workspace=str(root), return_state=True)  # fmt: skip
    assert state.is_completed()
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id])),
                                limit=200, offset=0)  # fmt: skip
    steps = sorted(log.message for log in logs if log.message.startswith("train sde: "))
    assert len(steps) == 3, steps  # steps 1 and 2, and the final record: rank 0 only
    assert "ETA" in steps[0] and "loss=" in steps[0] and "lr=" in steps[0]


def test_speed_options_reach_the_trainer_snapshots_and_costs_are_kept(cli, tiny_checkpoint, tmp_path):
    root = tmp_path / "ws"
    fill_workspace(root)
    common = ["--workspace", str(root), "train", "--arch", "sde", "--base", tiny_checkpoint, "--train", "toy:train",
              "--model-id", "fast", "--max-steps", "2", "--batch-size", "3", "--amp", "none"]  # fmt: skip
    snapshots = tmp_path / "snapshots"
    switches, recorded = switched_on()  # every on/off option: cached gradients, masked duplicates, ...
    cli(*common, "--threads", "1", "--bucket-tokens", "64", *switches,
        "--snapshot-every", "1", "--snapshot-dir", str(snapshots))  # fmt: skip
    assert sorted(p.name for p in snapshots.iterdir()) == ["step-0000001", "step-0000002"]
    assert json.loads((snapshots / "step-0000002" / "snapshot.json").read_text())["step"] == 2
    ws = Workspace.resolve(root)
    config = json.loads(ws.sql("SELECT config FROM models WHERE model_id = 'fast'").to_pylist()[0]["config"])
    training = config["training"]
    assert training["bucket_tokens"] == 64 and {name: training[name] for name in recorded} == recorded
    assert config["cpu_s"] > 0 and config["elapsed_s"] > 0
    log = ws.sql("SELECT step, cpu_s FROM training_log WHERE model_id = 'fast' ORDER BY step").to_pylist()
    assert log[-1]["step"] == 2 and log[-1]["cpu_s"] > 0
    # Options that change the arithmetic are part of the stage: without them it trains again.
    again = cli(*common, "--threads", "1")
    assert "no-op" not in again.output
    assert "no-op" in cli(*common, "--threads", "2").output  # threads only change the speed


def test_a_diverged_training_registers_nothing_and_says_what_to_change(cli, tiny_checkpoint, tmp_path):
    # lr 1e30 is a finite number the options accept; its first update makes every later loss nan.
    root = tmp_path / "ws"
    fill_workspace(root)
    result = cli("--workspace", str(root), "train", "--arch", "dpr", "--base", tiny_checkpoint, "--train",
                 "toy:train", "--model-id", "diverged", "--max-steps", "4", "--batch-size", "3", "--lr", "1e30",
                 "--warmup-steps", "0", ok=False)  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "odqa: error: training diverged at step " in result.output
    assert "no model is registered. Lower --lr (now 1e+30)" in result.output
    assert "train diverged: done" not in result.output
    ws = Workspace.resolve(root)
    assert ws.sql("SELECT count(*) AS n FROM models").to_pylist() == [{"n": 0}]
    assert not (root / "models" / "diverged").exists()
