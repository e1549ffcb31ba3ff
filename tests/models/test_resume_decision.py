"""`odqa train` after a kill: continue from the checkpoint only when it was written for the same
parameters and data, else start over and say why; a checkpoint swap cut by a kill is recovered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odqa.models.resume import RUN_FILE, resume_decision
from odqa.models.training_state import STATE_FILE, recover_checkpoint

PARAMS = {"arch": "sde", "lr": 2e-5, "max_steps": 40}


def _killed_run(work: Path, fingerprint: str, params: dict, step: int = 7) -> None:
    """What a run killed after its checkpoint at `step` leaves behind."""
    checkpoint = work / "checkpoint"
    checkpoint.mkdir(parents=True)
    state = {"step": step, "total_steps": 40, "written_at": "2026-11-24T13:40:48+00:00"}
    (checkpoint / STATE_FILE).write_text(json.dumps(state))
    (work / RUN_FILE).write_text(json.dumps({"fingerprint": fingerprint, "params": params}))


def test_same_parameters_and_data_resume(tmp_path):
    work = tmp_path / "m"
    _killed_run(work, "fp1", PARAMS)
    resuming, message = resume_decision(work, "m", "fp1", PARAMS, "auto")
    assert resuming
    assert message == "resuming m from step 7 of 40 (checkpoint written at 2026-11-24T13:40:48+00:00)"
    assert (work / "checkpoint" / STATE_FILE).is_file()


def test_changed_parameters_start_over_and_say_which(tmp_path):
    work = tmp_path / "m"
    _killed_run(work, "fp1", PARAMS)
    changed = {**PARAMS, "lr": 1e-4}
    resuming, message = resume_decision(work, "m", "fp2", changed, "auto")
    assert not resuming
    assert message == "not resuming m from its checkpoint: parameters changed (lr); starting over"
    assert not (work / "checkpoint").exists()
    assert json.loads((work / RUN_FILE).read_text()) == {"fingerprint": "fp2", "params": changed}


def test_changed_data_start_over(tmp_path):
    work = tmp_path / "m"
    _killed_run(work, "fp1", PARAMS)
    resuming, message = resume_decision(work, "m", "fp-new-tables", PARAMS, "auto")
    assert not resuming and "questions/passages tables or the base weights changed" in message


def test_explicit_resume_refuses_a_mismatch_and_restart_always_starts_over(tmp_path):
    work = tmp_path / "m"
    _killed_run(work, "fp1", PARAMS)
    with pytest.raises(ValueError, match="cannot continue: parameters changed \\(max_steps\\)"):
        resume_decision(work, "m", "fp2", {**PARAMS, "max_steps": 80}, "continue")
    with pytest.raises(ValueError, match="no checkpoint"):
        resume_decision(tmp_path / "fresh", "fresh", "fp1", PARAMS, "continue")
    resuming, message = resume_decision(work, "m", "fp1", PARAMS, "restart")
    assert not resuming and message == "not resuming m: starting over as asked"
    assert not (work / "checkpoint").exists()


def test_a_kill_between_the_two_renames_of_a_checkpoint_swap_is_recovered(tmp_path):
    folder = tmp_path / "checkpoint"
    for name, step in ((".checkpoint.old-aaa", 5), (".checkpoint.tmp-bbb", 9)):
        (tmp_path / name).mkdir()
        (tmp_path / name / STATE_FILE).write_text(json.dumps({"step": step}))
    (tmp_path / ".checkpoint.tmp-ccc").mkdir()  # a later write cut short: no trainer_state.json
    assert recover_checkpoint(folder)
    assert json.loads((folder / STATE_FILE).read_text())["step"] == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_a_checkpoint_without_run_file_resumes_only_when_asked(tmp_path):
    work = tmp_path / "m"
    _killed_run(work, "fp1", PARAMS)
    (work / RUN_FILE).unlink()  # written before run files existed
    resuming, _ = resume_decision(work, "m", "fp1", PARAMS, "continue")
    assert resuming  # the trainer still checks settings and data against the checkpoint
    resuming, message = resume_decision(work, "m", "fp1", PARAMS, "auto")
    assert not resuming and "has no run.json" in message
