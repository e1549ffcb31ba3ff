"""`odqa train-rounds` on the bundled sample: TASER's recipe end to end (BM25 negatives, round 1,
a SIGKILL between rounds, the same command resuming at round 2, which mines with round 1's model;
alpha on held-out training questions; final figures), and the settings it refuses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from odqa.storage import Workspace
from tests.conftest import REPO_ROOT

COMMON = ["--train", "trex:train", "--evaluate", "trex:test", "--max-steps", "2", "--batch-size", "4",
          "--mine-depth", "20", "--mine-count", "3", "--holdout", "0.2"]  # fmt: skip


def _split(ws: Workspace, split: str) -> list[dict]:
    return ws.read_table("questions", filter=(pc.field("dataset") == "trex") & (pc.field("split") == split)).to_pylist()


def _mined_by(ws: Workspace, model: str, questions: list[dict], depth: int, count: int) -> dict[str, set[str]]:
    """What `model` mines for the questions, recomputed here from its own index."""
    import pyarrow as pa

    from odqa.flows.stages.mine import mine_questions
    from odqa.models.searchers import RetrieverChoice, open_searcher

    searcher = open_searcher(ws, RetrieverChoice("dense", model)).searcher
    table = pa.Table.from_pylist([{k: q[k] for k in ("question_id", "question", "answers", "positive_ids")}
                                  for q in questions])  # fmt: skip
    try:
        mined = mine_questions(ws, searcher, table, depth, count, "string").negatives
    finally:
        searcher.close()
    return {q: set(ids) for q, ids in zip(mined["question_id"].to_pylist(), mined["hard_negative_ids"].to_pylist(),
                                          strict=True)}  # fmt: skip


def _command(workspace: Path, base: str) -> list[str]:
    return ["-w", str(workspace), "train-rounds", "--arch", "taser", "--base", base, "--model-id", "t", "--rounds", "2",
            *COMMON]  # fmt: skip


def _killed_after_round_one(command: list[str], ws: Workspace, env: dict[str, str], log: Path) -> None:
    """Run `odqa COMMAND` in a subprocess and SIGKILL it the moment round 1 has committed."""
    with open(log, "wb") as sink:
        job = subprocess.Popen([sys.executable, "-c", "from odqa.flows.cli import main; main()", *command], stdout=sink,
                               stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 600
    while ws.stage_record("train-rounds:t:round1") is None:
        assert job.poll() is None, f"ended before round 1 finished:\n{log.read_text()}"
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.02)
    os.killpg(job.pid, signal.SIGKILL)
    assert job.wait(timeout=60) == -signal.SIGKILL
    assert ws.stage_record("train-rounds:t:round2") is None, "the kill came too late to test resuming"


def test_killed_between_rounds_the_same_command_resumes_at_round_two_which_learns_from_round_one(
    cli, prefect_harness: str, sample_copy: Path, tiny_encoder: str, tmp_path: Path
) -> None:
    """TASER's recipe end to end: BM25 negatives, round 1, a real SIGKILL, the same command: round 1
    recognised, round 2 on negatives mined by round 1's model, alpha on held-out training questions."""
    from odqa.pipelines.evaluation.answers import has_answer
    from odqa.pipelines.questions.rows import stable_id

    ws = Workspace.resolve(sample_copy)
    before = {q["question_id"]: q["hard_negative_ids"] for q in _split(ws, "train")}
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PREFECT_API_URL": prefect_harness, "OMP_NUM_THREADS": "1"}
    _killed_after_round_one(_command(sample_copy, tiny_encoder), ws, env, tmp_path / "killed.log")
    round1, trained1 = ws.stage_record("train-rounds:t:round1"), ws.stage_record("train-t-round1")
    weights = ws.models_dir / "t-round1" / "model.safetensors"
    written = weights.stat().st_mtime_ns

    out = cli(*_command(sample_copy, tiny_encoder)).output
    first, second = out.split("round 2/2: ")
    assert "round 1/2: t-round1 on BM25 negatives (1 per question); " in first, out
    assert "done before (recognised from the workspace)" in first, out
    assert second.startswith("t-round2 on negatives mined by t-round1") and "done before" not in second, out
    assert ws.stage_record("train-rounds:t:round1") == round1  # the finished round was not recomputed
    assert ws.stage_record("train-t-round1") == trained1 and weights.stat().st_mtime_ns == written
    rounds = [ws.stage_record(f"train-rounds:t:round{r}").report for r in (1, 2)]
    assert [r["negatives_from"] for r in rounds] == ["bm25", "t-round1"]

    # The recipe's copies: the held-out questions are not trained on; the user's split is untouched.
    split = rounds[0]["negatives"][0]["split"]
    held_out = split.replace("-fit-", "-tune-")
    fit, tune, original = _split(ws, split), _split(ws, held_out), _split(ws, "train")
    fit_ids, tune_ids = {q["question_id"] for q in fit}, {q["question_id"] for q in tune}
    assert tune and len(fit) + len(tune) == len(original)
    assert all((stable_id("trex", split, q["question_id"]) in fit_ids)
               != (stable_id("trex", held_out, q["question_id"]) in tune_ids) for q in original)  # fmt: skip
    assert {q["question_id"]: q["hard_negative_ids"] for q in original} == before
    assert f"tuned on held-out trex:{held_out}" in out
    assert ws.stage_record("tune-hybrid:t-round2").report["dev"] == [f"trex:{held_out}"]

    # Round 2 trained on P1 (one BM25 negative) united with what round 1's model mines.
    mined = _mined_by(ws, "t-round1", fit, depth=20, count=3)
    passages = {p["passage_id"]: p["text"] for p in ws.read_table("passages", columns=["passage_id", "text"]).to_pylist()}
    for question in fit:
        negatives = set(question["hard_negative_ids"])
        assert mined[question["question_id"]] and mined[question["question_id"]] <= negatives
        assert len(negatives - mined[question["question_id"]]) <= 1
        assert not negatives & set(question["positive_ids"] or [])
        assert not any(has_answer(passages[p], question["answers"]) for p in negatives)
    assert rounds[1]["negatives"][0]["mean_per_question"] > rounds[0]["negatives"][0]["mean_per_question"] == 1
    # Round 1 tokenized its training passages into passage_tokens; its model's index build added
    # the rest, so round 2 trains on stored token ids only.
    tokens1, tokens2 = (ws.stage_record(f"train-t-round{r}").report for r in (1, 2))
    assert tokens1["passages_tokenized"] > 0 and tokens1["passage_tokens_reused"] == 0, tokens1
    assert tokens2["passages_tokenized"] == 0 and tokens2["passage_tokens_reused"] > 0, tokens2

    # Each round's figures and the final ones are metrics rows.
    rows = ws.sql("SELECT \"group\", dataset, split, metric FROM metrics WHERE run = 'train-rounds:t'").to_pylist()
    groups = {(r["group"], r["dataset"], r["split"], r["metric"]) for r in rows}
    for group in ("round 1", "round 2", "final dense", "final hybrid", "final bm25"):
        assert (group, "trex", "test", "R@20") in groups, group
    assert ("round 2", "trex", split, "hard_negatives_per_question") in groups


@pytest.mark.parametrize("bad, message", [
    (["--evaluate", "trex:train"], "both a training and an evaluation set"),
    (["--holdout", "0"], "held-out training questions"),
])  # fmt: skip
def test_tuning_or_evaluating_on_the_training_questions_is_refused(cli, sample_copy: Path, tiny_encoder: str,
                                                                    bad: list[str], message: str) -> None:  # fmt: skip
    args = ["-w", str(sample_copy), "train-rounds", "--base", tiny_encoder, "--model-id", "x", "--train", "trex:train",
            "--evaluate", "trex:test", "--max-steps", "1", *bad]  # fmt: skip
    result = cli(*args, ok=False)
    assert result.exit_code == 1 and message in result.output, result.output
