"""Whether a training run continues from its checkpoint, and the line that says so.

A training of a model id keeps its checkpoint and a run file (`run.json`: the stage fingerprint
and parameters it belongs to) in one work folder. The same command after a kill, or a retried
flow run, continues exactly when the checkpoint was written for the same parameters, data and
base weights; otherwise it starts over and says why.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Literal

from ..storage.atomic import atomic_write_json
from .training_state import CHECKPOINT_DIR, STATE_FILE, is_checkpoint, recover_checkpoint

RUN_FILE = "run.json"  # the stage fingerprint and parameters the checkpoint beside it belongs to
# auto: continue when the checkpoint was written for the same parameters and data, else start
# over and say why; continue: must continue (`--resume`); restart: start over (`--restart`).
ResumeMode = Literal["auto", "continue", "restart"]


def _state(checkpoint: Path) -> dict[str, Any]:
    """A training checkpoint's trainer_state.json."""
    return json.loads((checkpoint / STATE_FILE).read_text(encoding="utf-8"))


def checkpoint_summary(checkpoint: Path) -> dict[str, Any]:
    """Step, total steps and write time of a training checkpoint (from its trainer_state.json)."""
    state = _state(checkpoint)
    total = state.get("total_steps") or state.get("config", {}).get("max_steps") or "?"
    return {"step": state["step"], "total": total, "written_at": state.get("written_at", "?")}


def checkpoint_config(work: Path) -> dict[str, Any]:
    """The training settings the checkpoint in `work` was written with (its trainer_state.json)."""
    return _state(work / CHECKPOINT_DIR).get("config", {})


def resume_decision(
    work: Path, model_id: str, stage_fp: str, params: dict[str, Any], resume: ResumeMode = "auto"
) -> tuple[bool, str | None]:
    """Whether training continues from the checkpoint in `work`, and the line saying so (or why not).

    `resume="auto"` (the default) continues when the checkpoint was written for this stage
    fingerprint (same parameters, data and base weights) and starts over otherwise; "continue"
    insists on continuing (an error when it cannot); "restart" always starts over. Starting
    over empties `work`.
    """
    checkpoint = work / CHECKPOINT_DIR
    run_file = work / RUN_FILE
    recover_checkpoint(checkpoint)
    why = None
    insist = resume == "continue"
    if resume == "restart":
        why = None if not is_checkpoint(checkpoint) else f"not resuming {model_id}: starting over as asked"
    elif not is_checkpoint(checkpoint):
        if insist:
            raise ValueError(f"--resume: {model_id} has no checkpoint in {work} to continue from")
    else:
        saved = json.loads(run_file.read_text(encoding="utf-8")) if run_file.is_file() else None
        # A checkpoint of an older version has no run file: --resume trusts the trainer's own
        # check of settings and data; the default starts over rather than guess.
        if (saved or {}).get("fingerprint") == stage_fp or (saved is None and insist):
            where = checkpoint_summary(checkpoint)
            return True, (f"resuming {model_id} from step {where['step']} of {where['total']} "
                          f"(checkpoint written at {where['written_at']})")  # fmt: skip
        old = (saved or {}).get("params", {})
        changed = sorted(k for k in set(old) | set(params) if old.get(k) != params.get(k))
        if saved is None:
            reason = f"it has no {RUN_FILE} saying which parameters it was written for"
        elif changed:
            reason = f"parameters changed ({', '.join(changed)})"
        else:
            reason = "the questions/passages tables or the base weights changed"
        if insist:
            raise ValueError(f"--resume: the checkpoint of {model_id} cannot continue: {reason}")
        why = f"not resuming {model_id} from its checkpoint: {reason}; starting over"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    atomic_write_json(run_file, {"fingerprint": stage_fp, "params": params})
    return False, why
