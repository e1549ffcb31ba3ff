"""`odqa train`: train a retriever on workspace questions/passages and register it in `models`.

Tasks:
1. `load-training-examples`: questions of NAME:SPLIT joined with the passages they reference
   (positives, hard negatives) into a Parquet examples file; questions without a known
   positive are skipped and counted.
2. `train-retriever` (tagged `gpu`, so a Prefect concurrency limit on that tag holds training
   to one run per GPU): runs the training job in-process, or under torchrun with `gpus > 1`.
3. `register-model`: copies the best (or last) model into `<workspace>/models/<model_id>` and
   writes its row in the `models` table (arch, parameters, path, base, trained_on, config with
   dev metrics) and its curve in `training_log` (step, loss, lr, examples/s, elapsed) in one
   atomic commit.

The stage is keyed on the model id, parameters and the questions/passages table versions: the
same command on unchanged data is a no-op. Checkpoints (every `checkpoint_minutes`, default 10,
and at the end) live in `models/.training/<model_id>` until the model is registered. The same
command after a kill, or a retried flow run (same parameters), resumes from the checkpoint
exactly when it was written for the same parameters and data; otherwise it starts over and
says why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from prefect import flow, task

from flows.console import tell
from flows.runtime import flow_run_logs, run_log_env, stage_logger
from models.base import replace_directory
from models.config import ARCHS, DESIRE_ME_ARCHS
from models.data import examples_from_tables, read_examples, referenced_passage_ids, write_examples
from models.job import TrainingJob, TrainSet, run_job
from models.trainer import changed_auto_precision
from models.training_state import OPTIMIZER_FILE, RNG_FILE, STATE_FILE, is_checkpoint, recover_checkpoint
from storage import Workspace
from storage.fingerprint import file_sha256, fingerprint

STAGE_PREFIX = "train"
TRAINING_DIR = ".training"
RUN_FILE = "run.json"  # the stage fingerprint and parameters the checkpoint beside it belongs to


def parse_dataset_spec(spec: str, with_weight: bool = True) -> tuple[str, str, float]:
    """NAME:SPLIT[:WEIGHT] -> (name, split, weight)."""
    parts = spec.split(":")
    if len(parts) not in ((2, 3) if with_weight else (2,)) or not all(parts[:2]):
        expected = "NAME:SPLIT[:WEIGHT]" if with_weight else "NAME:SPLIT"
        raise ValueError(f"dataset spec {spec!r}: expected {expected}")
    weight = 1.0
    if len(parts) == 3:
        try:
            weight = float(parts[2])
        except ValueError:
            raise ValueError(f"dataset spec {spec!r}: weight {parts[2]!r} is not a number") from None
        if weight <= 0:
            raise ValueError(f"dataset spec {spec!r}: weight must be > 0")
    return parts[0], parts[1], weight


def resolve_base(ws: Workspace, base: str) -> str:
    """A model id registered in this workspace, else the HF name / local path as given."""
    registered = ws.models_dir / base
    if (registered / "config.json").is_file():
        return str(registered)
    return base


def base_identity(base: str) -> Any:
    """What identifies the starting weights: file hashes for a local folder, else the name."""
    folder = Path(base)
    if not folder.is_dir():
        return base
    files = [f for f in ("config.json", "model.safetensors") if (folder / f).is_file()]
    return {f: file_sha256(folder / f) for f in files}


def checkpoint_summary(checkpoint: Path) -> dict[str, Any]:
    """Step, total steps and write time of a training checkpoint (from its trainer_state.json)."""
    state = json.loads((checkpoint / STATE_FILE).read_text(encoding="utf-8"))
    total = state.get("total_steps") or state.get("config", {}).get("max_steps") or "?"
    return {"step": state["step"], "total": total, "written_at": state.get("written_at", "?")}


def resume_decision(
    work: Path, model_id: str, stage_fp: str, params: dict[str, Any], resume: bool | None
) -> tuple[bool, str | None]:
    """Whether training continues from the checkpoint in `work`, and the line saying so (or why not).

    `resume=None` (the default) continues when the checkpoint was written for this stage
    fingerprint (same parameters, data and base weights) and starts over otherwise; `True`
    insists on continuing (an error when it cannot); `False` always starts over. Starting
    over empties `work`.
    """
    checkpoint = work / "checkpoint"
    run_file = work / RUN_FILE
    recover_checkpoint(checkpoint)
    why = None
    if resume is False:
        why = None if not is_checkpoint(checkpoint) else f"not resuming {model_id}: starting over as asked"
    elif not is_checkpoint(checkpoint):
        if resume:
            raise ValueError(f"--resume: {model_id} has no checkpoint in {work} to continue from")
    else:
        saved = json.loads(run_file.read_text(encoding="utf-8")) if run_file.is_file() else None
        # A checkpoint of an older version has no run file: --resume trusts the trainer's own
        # check of settings and data; the default starts over rather than guess.
        if (saved or {}).get("fingerprint") == stage_fp or (saved is None and resume):
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
        if resume:
            raise ValueError(f"--resume: the checkpoint of {model_id} cannot continue: {reason}")
        why = f"not resuming {model_id} from its checkpoint: {reason}; starting over"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    temporary = work / f".{RUN_FILE}.tmp"
    temporary.write_text(json.dumps({"fingerprint": stage_fp, "params": params}, default=str), encoding="utf-8")
    temporary.replace(run_file)
    return False, why


@task(name="load-training-examples")
def load_examples_task(workspace: str, dataset: str, split: str, output: str) -> dict[str, Any]:
    ws = Workspace.resolve(workspace)
    selector = (pc.field("dataset") == dataset) & (pc.field("split") == split)
    questions = ws.read_table("questions", filter=selector)
    if questions.num_rows == 0:
        raise ValueError(
            f"no questions for {dataset}:{split} in {ws.root}; import them first (odqa import questions ...)"
        )
    ids = sorted(referenced_passage_ids(questions))
    passages = ws.read_table(
        "passages", columns=["passage_id", "title", "text"], filter=pc.field("passage_id").isin(ids)
    )
    examples, skipped = examples_from_tables(questions, passages)
    if not examples:
        raise ValueError(
            f"{dataset}:{split}: none of its {questions.num_rows} questions has a positive passage present "
            f"in the passages table ({dict(skipped)})"
        )
    write_examples(examples, Path(output))
    domains = sorted({d for e in examples for d in e.domains})
    return {"examples": len(examples), "skipped": dict(skipped), "domains": domains}


@task(name="train-retriever", tags=["gpu"])
def train_task(job_file: str, gpus: int) -> dict[str, Any]:
    job = TrainingJob.read(Path(job_file))
    if gpus > 1:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={gpus}",
            "-m",
            "flows.train_worker",
            job_file,
        ]
        subprocess.run(command, check=True, env={**os.environ, **run_log_env()})
    else:
        run_job(job)
    return json.loads(Path(job.result_path).read_text(encoding="utf-8"))


@task(name="register-model")
def register_task(
    workspace: str, model_id: str, stage_fingerprint: str, result: dict[str, Any], row: dict[str, Any]
) -> dict[str, Any]:
    ws = Workspace.resolve(workspace)
    source = Path(result["model_dir"])
    target = ws.models_dir / model_id
    staging = ws.models_dir / f".{model_id}.tmp-{uuid.uuid4().hex}"
    training_files = {OPTIMIZER_FILE, RNG_FILE, STATE_FILE}
    shutil.copytree(source, staging, ignore=lambda _, names: [n for n in names if n in training_files])
    try:
        replace_directory(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    created_at = datetime.now(timezone.utc)
    record = {**row, "path": str(target), "created_at": created_at}
    curve = [{"model_id": model_id, **entry, "created_at": created_at} for entry in result.get("log", [])]
    with ws.transaction(f"{STAGE_PREFIX}-{model_id}", fingerprint=stage_fingerprint) as tx:
        tx.replace_source("models", model_id)
        tx.write("models", [record], source=model_id)
        tx.replace_source("training_log", model_id)
        if curve:
            tx.write("training_log", curve, source=model_id)
        tx.report = {k: v for k, v in record.items() if k not in ("config", "created_at")}
    return {k: v for k, v in record.items() if k != "config"}


@flow(name="train")
def train_flow(
    arch: str,
    base: str,
    train: list[str],
    model_id: str,
    dev: str | None = None,
    max_steps: int | None = None,
    epochs: int | None = None,
    batch_size: int = 16,
    lr: float = 2e-5,
    hard_negatives: int = 1,
    routing: str = "det",
    pooling: str | None = None,
    seed: int = 0,
    resume: bool | None = None,
    workspace: str | None = None,
    gpus: int = 1,
    accumulation_steps: int = 1,
    eval_every: int | None = None,
    objective: str = "contrastive",
    temperature: float | None = None,
    freeze: str | None = None,
    num_experts: int | None = None,
    warmup_steps: int | None = None,
    amp: str = "auto",
    checkpoint_minutes: float | None = 10.0,
    threads: int | None = None,
    bucket_tokens: int | None = None,
    grad_cache: bool = False,
    mask_duplicates: bool = False,
    snapshot_every: int | None = None,
    snapshot_dir: str | None = None,
) -> dict[str, Any]:
    """Train ARCH from BASE on TRAIN sets (NAME:SPLIT[:WEIGHT]); register it as MODEL_ID.

    A checkpoint is written every `checkpoint_minutes` (and at the end). `resume`: None (default)
    continues from a checkpoint of the same parameters and data (after a kill, or when Prefect
    retries the run), else starts over and says why; True requires continuing; False starts over.

    `amp`: "auto" (bf16/fp16 autocast on GPU, bf16 on CPUs with bf16 units, else full precision),
    "bf16", "fp16" (GPU only) or "none". `threads`: torch threads for the run (default: torch's).
    `bucket_tokens`: encode each micro-batch in length buckets of at most this many padded
    tokens; `grad_cache`: cached-gradient steps over those buckets (memory of one bucket);
    `mask_duplicates`: another copy of a question's positive in the batch is not its negative.
    `snapshot_every` steps a copy of the model goes to `snapshot_dir` (default
    `<workspace>/models/.training/<model_id>/snapshots`, removed once the model is registered)
    with the wall and CPU time spent to reach it."""
    log = stage_logger()
    ws = Workspace.resolve(workspace)
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHS)}")
    if not train:
        raise ValueError("give at least one --train NAME:SPLIT[:WEIGHT]")
    if (max_steps is None) == (epochs is None):
        raise ValueError("give exactly one of --max-steps or --epochs")
    if "/" in model_id or model_id.startswith("."):
        raise ValueError(f"model id {model_id!r} must be a plain name (no '/', not starting with '.')")
    specs = [parse_dataset_spec(s) for s in train]
    dev_spec = parse_dataset_spec(dev, with_weight=False) if dev else None
    base_path = resolve_base(ws, base)
    params = {
        "arch": arch,
        "base": base,
        "train": train,
        "dev": dev,
        "max_steps": max_steps,
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "hard_negatives": hard_negatives,
        "routing": routing,
        "pooling": pooling,
        "seed": seed,
        "gpus": gpus,
        "accumulation_steps": accumulation_steps,
        "eval_every": eval_every,
        "objective": objective,
        "temperature": temperature,
        "freeze": freeze,
        "num_experts": num_experts,
        "warmup_steps": warmup_steps,
        # Only a non-default amp enters the fingerprint, so models trained before the option
        # existed (always the default) stay current; likewise the options below, which enter
        # it only where they change what the trainer computes.
        **({"amp": amp} if amp != "auto" else {}),
        **({"precision": precision} if (precision := changed_auto_precision(amp)) else {}),
        **({"bucket_tokens": bucket_tokens} if bucket_tokens else {}),
        **({"grad_cache": True} if grad_cache else {}),
        **({"mask_duplicates": True} if mask_duplicates else {}),
    }
    stage = f"{STAGE_PREFIX}-{model_id}"
    stage_fp = fingerprint(
        stage, params, base_identity(base_path), ws.table_version("questions"), ws.table_version("passages")
    )
    if ws.stage_is_current(stage, stage_fp) and (ws.models_dir / model_id / "config.json").is_file():
        log.info("%s: same data and parameters as the registered model, nothing to do (no-op)", model_id)
        record = ws.stage_record(stage)
        return {**(record.report if record else {}), "noop": True}

    work = ws.models_dir / TRAINING_DIR / model_id
    resuming, message = resume_decision(work, model_id, stage_fp, params, resume)
    if message:
        tell("%s", message)  # the terminal too: a user must see that a run resumed, or why not
    data_dir = work / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    train_sets, loaded = [], {}
    for name, split, weight in specs:
        path = data_dir / f"train-{name}-{split}.parquet"
        loaded[f"{name}:{split}"] = load_examples_task(str(ws.root), name, split, str(path))
        train_sets.append(TrainSet(name=f"{name}:{split}", path=str(path), weight=weight))
    dev_path = None
    if dev_spec:
        dev_path = str(data_dir / f"dev-{dev_spec[0]}-{dev_spec[1]}.parquet")
        loaded[dev] = load_examples_task(str(ws.root), dev_spec[0], dev_spec[1], dev_path)

    model_options: dict[str, Any] = {"pooling": pooling, "freeze": freeze}
    if arch in ("taser", "taser-shared"):
        model_options.update(routing=routing, num_experts=num_experts)
    if arch in DESIRE_ME_ARCHS:
        domains = sorted({d for s in train_sets for e in read_examples(Path(s.path)) for d in e.domains})
        if not domains:
            raise ValueError(
                f"{arch} needs domain labels on the training questions; run `odqa label domains` first"
            )
        model_options = {"pooling": pooling, "domains": domains}
    training = {
        "output_dir": str(work),
        "batch_size": batch_size,
        "hard_negatives": hard_negatives,
        "learning_rate": lr,
        "max_steps": max_steps,
        "epochs": epochs,
        "accumulation_steps": accumulation_steps,
        "seed": seed,
        "eval_every": eval_every,
        "objective": objective,
        "temperature": temperature,
        "warmup_steps": warmup_steps,
        "amp": amp,
        "checkpoint_minutes": checkpoint_minutes,
        "threads": threads,
        "bucket_tokens": bucket_tokens,
        "grad_cache": grad_cache,
        "mask_duplicates": mask_duplicates,
        "snapshot_every": snapshot_every,
        "snapshot_dir": str(Path(snapshot_dir).resolve()) if snapshot_dir else None,
    }
    job = TrainingJob(
        arch=arch,
        base=base_path,
        training=training,
        train_sets=train_sets,
        dev_path=dev_path,
        model_options=model_options,
        resume=resuming,
        result_path=str(work / "result.json"),
    )
    job_file = work / "job.json"
    job.write(job_file)
    with flow_run_logs():  # progress records from any thread of this process reach this run's logs
        result = train_task(str(job_file), gpus)

    trained_on = ",".join(f"{s.name}:{s.weight:g}" for s in train_sets)
    config = {
        "retriever": result["retriever_config"],
        "training": training | {"gpus": gpus},
        "train_sets": [asdict(s) | {"path": None} for s in train_sets],
        "data": loaded,
        "dev": {
            "dataset": dev,
            "best_step": result["best_step"],
            "metrics": result["best_metrics"],
            "history": result["dev_history"],
        },
        "steps": result["steps"],
        "final_loss": result["final_loss"],
        "trainable_parameters": result["trainable_parameters"],
        "elapsed_s": result.get("elapsed_s"),  # training loop wall time (all sessions)
        "cpu_s": result.get("cpu_s"),  # training process CPU time, user + system (all sessions)
    }
    row = {
        "model_id": model_id,
        "arch": arch,
        "parameters": result["parameters"],
        "base": base,
        "trained_on": trained_on,
        "config": json.dumps(config, sort_keys=True, default=str),
    }
    report = register_task(str(ws.root), model_id, stage_fp, result, row)
    shutil.rmtree(work, ignore_errors=True)
    report.update(
        {
            "steps": result["steps"],
            "final_loss": round(result["final_loss"], 4),
            **{f"dev_{k}": v for k, v in result["best_metrics"].items()},
        }
    )
    if resuming:
        report["resumed"] = message
    log.info("trained %s (%s, %d parameters)", model_id, arch, result["parameters"])
    return {**report, "noop": False}
