"""`odqa train`: train a retriever on workspace questions/passages and register it in `models`.

Tasks:
1. `load-training-examples`: questions of NAME:SPLIT joined with the passages they reference
   (positives, hard negatives) into a Parquet examples file; questions without a known
   positive are skipped and counted.
2. `train-retriever` (tagged `gpu`, so a Prefect concurrency limit on that tag holds training
   to one run per GPU): runs the training job in-process, or under torchrun with `gpus > 1`.
3. registration (`storage.model_registry.register_model`): the best (or last) model goes to
   `<workspace>/models/<model_id>`, with its row in `models` (arch, parameters, path, base,
   trained_on, config with dev metrics) and its curve in `training_log` (step, loss, lr,
   examples/s, elapsed), in one atomic commit.

The stage is keyed on the model id, parameters and the questions/passages table versions: the
same command on unchanged data is a no-op. Checkpoints (every `checkpoint_minutes`, default 10,
and at the end) live in `models/.training/<model_id>` until the model is registered; the same
command after a kill, or a retried flow run, resumes from the checkpoint when it was written for
the same parameters and data (`models.resume`), otherwise it starts over and says why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow, task

from flows.console import tell
from flows.runtime import flow_run_logs, run_log_env, stage_logger
from flows.stages import finished_report
from models.config import ARCHS, DESIRE_ME_ARCHS
from models.data import examples_from_tables, read_examples, referenced_passage_ids, write_examples
from models.job import TrainingJob, TrainSet, run_job
from models.resume import resume_decision
from models.trainer import changed_auto_precision
from models.training_state import OPTIMIZER_FILE, RNG_FILE, STATE_FILE
from pipelines.questions.specs import DatasetSpec
from storage import Workspace
from storage.fingerprint import fingerprint
from storage.locks import writer_lock
from storage.model_registry import (
    check_model_id,
    model_dir,
    model_identity,
    model_is_registered,
    register_model,
    resolve_model,
    training_dir,
    training_examples_file,
)
from storage.passages import passages_with_ids
from storage.questions import load_questions
from storage.reports import Report

STAGE_PREFIX = "train"
TRAINING_FILES = frozenset({OPTIMIZER_FILE, RNG_FILE, STATE_FILE})  # checkpoint state, not part of a model


@dataclass
class ExamplesReport(Report):
    examples: int
    skipped: dict[str, int]
    domains: list[str]


@dataclass
class TrainReport(Report):
    model_id: str
    arch: str
    parameters: int
    path: str
    base: str
    trained_on: str
    steps: int = 0
    final_loss: float = 0.0
    dev_metrics: dict[str, float] = field(default_factory=dict)
    resumed: str | None = None


@task(name="load-training-examples")
def load_examples_task(workspace: str, dataset: str, split: str, output: str) -> ExamplesReport:
    ws = Workspace.resolve(workspace)
    questions = load_questions(ws, dataset, split)
    passages = passages_with_ids(ws, sorted(referenced_passage_ids(questions)))
    examples, skipped = examples_from_tables(questions, passages)
    if not examples:
        raise ValueError(f"{dataset}:{split}: none of its {questions.num_rows} questions has a positive passage "
                         f"present in the passages table ({dict(skipped)})")  # fmt: skip
    write_examples(examples, Path(output))
    return ExamplesReport(examples=len(examples), skipped=dict(skipped),
                          domains=sorted({d for e in examples for d in e.domains}))  # fmt: skip


@task(name="train-retriever", tags=["gpu"])
def train_task(job_file: str, gpus: int) -> dict[str, Any]:
    job = TrainingJob.read(Path(job_file))
    if gpus > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
                   "-m", "flows.train_worker", job_file]  # fmt: skip
        subprocess.run(command, check=True, env={**os.environ, **run_log_env()})
    else:
        run_job(job)
    return json.loads(Path(job.result_path).read_text(encoding="utf-8"))


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
) -> TrainReport:
    """Train ARCH from BASE on TRAIN sets (NAME:SPLIT[:WEIGHT]); register it as MODEL_ID.

    The Args below are also the descriptions of the `train/train` deployment's Custom run form.

    Args:
        arch: Retriever architecture: dpr, ade, sde, ade-ste, ade-fte, ade-spl, taser, taser-shared,
            desire-me or rnd-g.
        base: Starting checkpoint: a Hugging Face name, a folder, or (desire-me, rnd-g) a model id
            registered in this workspace.
        train: Training question sets as NAME:SPLIT[:WEIGHT], e.g. trex:train; WEIGHT scales how often
            a set is drawn per epoch.
        model_id: Name of the trained model: its folder under models/ and its `models` row.
        dev: Dev questions NAME:SPLIT for R@K model selection; empty: no dev evaluation.
        max_steps: Optimizer steps; give this or epochs, not both.
        epochs: Epochs over the training sets, instead of max_steps.
        batch_size: Questions per device and step.
        lr: Peak learning rate (AdamW, linear warmup and decay).
        hard_negatives: Hard negative passages per question.
        routing: TASER expert routing: det (deterministic), seq (per sequence) or tok (per token).
        pooling: cls or mean; empty: the checkpoint's sentence-transformers setting, else cls.
        seed: Random seed of sampling and initialisation.
        resume: None (the default): continue from a checkpoint written for the same parameters
            and data (after a kill, or when Prefect retries the run), else start over and say
            why; true: must continue; false: start over.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker (`./run server` sets it to
            its workspace), else ./workspace.
        gpus: GPUs to train on; more than 1 runs torchrun (DDP).
        accumulation_steps: Gradient accumulation micro-batches per optimizer step.
        eval_every: Dev evaluation interval in steps; empty: at the end only.
        objective: Training loss: contrastive, stopgrad or flipped (thesis 5.1 variants).
        temperature: Softmax temperature; empty: 1 for dot product, 0.05 for cosine.
        freeze: Freeze one tower of a two-tower model: question or passage (thesis fixQ / fixP);
            empty: train both.
        num_experts: TASER experts per specialized block; empty: 2.
        warmup_steps: Learning-rate warmup steps; empty: 10% of the steps.
        amp: Mixed precision: auto (bf16/fp16 autocast on GPU, bf16 on CPUs with bf16 matrix units,
            about 2x faster per step, else full precision), bf16, fp16 (GPU only) or none.
        checkpoint_minutes: Wall time between resumable checkpoints (one is also written at the end);
            empty: only at the end.
        threads: Torch threads for training; empty: torch's default (one per core).
        bucket_tokens: Encode each micro-batch in length-sorted buckets of at most this many padded
            tokens (less padding); empty: one bucket.
        grad_cache: Cached-gradient (GradCache) steps over the buckets: the memory of one bucket
            whatever the batch size; needs bucket_tokens.
        mask_duplicates: Another copy of a question's positive passage in the batch is not counted
            as its negative.
        snapshot_every: Keep a copy of the model every this many steps, with the wall and CPU time
            spent to reach it (quality-vs-cost curves); empty: none.
        snapshot_dir: Where snapshots go; empty: inside the training folder, removed once the
            model is registered.
    """
    log = stage_logger()
    ws = Workspace.resolve(workspace)
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHS)}")
    if not train:
        raise ValueError("give at least one --train NAME:SPLIT[:WEIGHT]")
    if (max_steps is None) == (epochs is None):
        raise ValueError("give exactly one of --max-steps or --epochs")
    check_model_id(model_id)
    specs = [DatasetSpec.parse(s) for s in train]
    dev_spec = DatasetSpec.parse(dev, with_weight=False) if dev else None
    base_path = resolve_model(ws, base).path
    params = {
        "arch": arch, "base": base, "train": train, "dev": dev, "max_steps": max_steps, "epochs": epochs,
        "batch_size": batch_size, "lr": lr, "hard_negatives": hard_negatives, "routing": routing, "pooling": pooling,
        "seed": seed, "gpus": gpus, "accumulation_steps": accumulation_steps, "eval_every": eval_every,
        "objective": objective, "temperature": temperature, "freeze": freeze, "num_experts": num_experts,
        "warmup_steps": warmup_steps,
        # Only a non-default amp enters the fingerprint, so models trained before the option
        # existed (always the default) stay current; likewise the options below, which enter
        # it only where they change what the trainer computes.
        **({"amp": amp} if amp != "auto" else {}),
        **({"precision": precision} if (precision := changed_auto_precision(amp)) else {}),
        **({"bucket_tokens": bucket_tokens} if bucket_tokens else {}),
        **({"grad_cache": True} if grad_cache else {}),
        **({"mask_duplicates": True} if mask_duplicates else {}),
    }  # fmt: skip
    stage = f"{STAGE_PREFIX}-{model_id}"
    stage_fp = fingerprint(stage, params, model_identity(base_path), ws.table_version("questions"),
                           ws.table_version("passages"))  # fmt: skip
    # One training per model id: a second `odqa train --model-id` of the same id is refused, naming
    # this run, instead of training into (or deleting) the same folder.
    with writer_lock(ws.root, f"model:{model_id}", f"the model {model_id!r}"):
        done = finished_report(ws, stage, stage_fp, TrainReport, "same data and parameters as the registered model")
        if done is not None and model_is_registered(ws, model_id):
            return done

        work = training_dir(ws, model_id)
        resuming, message = resume_decision(work, model_id, stage_fp, params, resume)
        if message:
            tell("%s", message)  # the terminal too: a user must see that a run resumed, or why not
        train_sets, loaded = [], {}
        for spec in specs:
            path = training_examples_file(ws, model_id, "train", spec.dataset, spec.split)
            loaded[spec.name] = asdict(load_examples_task(str(ws.root), spec.dataset, spec.split, str(path)))
            train_sets.append(TrainSet(name=spec.name, path=str(path), weight=spec.weight))
        dev_path = None
        if dev_spec:
            dev_path = str(training_examples_file(ws, model_id, "dev", dev_spec.dataset, dev_spec.split))
            loaded[dev_spec.name] = asdict(load_examples_task(str(ws.root), dev_spec.dataset, dev_spec.split, dev_path))

        model_options: dict[str, Any] = {"pooling": pooling, "freeze": freeze}
        if arch in ("taser", "taser-shared"):
            model_options.update(routing=routing, num_experts=num_experts)
        if arch in DESIRE_ME_ARCHS:
            domains = sorted({d for s in train_sets for e in read_examples(Path(s.path)) for d in e.domains})
            if not domains:
                raise ValueError(f"{arch} needs domain labels on the training questions; run `odqa label domains` first")
            model_options = {"pooling": pooling, "domains": domains}
        training = {
            "output_dir": str(work), "batch_size": batch_size, "hard_negatives": hard_negatives, "learning_rate": lr,
            "max_steps": max_steps, "epochs": epochs, "accumulation_steps": accumulation_steps, "seed": seed,
            "eval_every": eval_every, "objective": objective, "temperature": temperature, "warmup_steps": warmup_steps,
            "amp": amp, "checkpoint_minutes": checkpoint_minutes, "threads": threads, "bucket_tokens": bucket_tokens,
            "grad_cache": grad_cache, "mask_duplicates": mask_duplicates, "snapshot_every": snapshot_every,
            "snapshot_dir": str(Path(snapshot_dir).resolve()) if snapshot_dir else None,
        }  # fmt: skip
        job = TrainingJob(arch=arch, base=base_path, training=training, train_sets=train_sets, dev_path=dev_path,
                          model_options=model_options, resume=resuming, result_path=str(work / "result.json"))  # fmt: skip
        job_file = work / "job.json"
        job.write(job_file)
        with flow_run_logs():  # progress records from any thread of this process reach this run's logs
            result = train_task(str(job_file), gpus)

        trained_on = ",".join(f"{s.name}:{s.weight:g}" for s in train_sets)
        config = {
            "retriever": result["retriever_config"], "training": training | {"gpus": gpus},
            "train_sets": [asdict(s) | {"path": None} for s in train_sets], "data": loaded,
            "dev": {"dataset": dev, "best_step": result["best_step"], "metrics": result["best_metrics"],
                    "history": result["dev_history"]},
            "steps": result["steps"], "final_loss": result["final_loss"],
            "trainable_parameters": result["trainable_parameters"],
            "elapsed_s": result.get("elapsed_s"),  # training loop wall time (all sessions)
            "cpu_s": result.get("cpu_s"),  # training process CPU time, user + system (all sessions)
        }  # fmt: skip
        row = {"arch": arch, "parameters": result["parameters"], "base": base, "trained_on": trained_on,
               "config": json.dumps(config, sort_keys=True, default=str)}  # fmt: skip
        report = TrainReport(model_id=model_id, arch=arch, parameters=result["parameters"],
                             path=str(model_dir(ws, model_id)), base=base, trained_on=trained_on, steps=result["steps"],
                             final_loss=round(result["final_loss"], 4), dev_metrics=dict(result["best_metrics"]),
                             resumed=message if resuming else None)  # fmt: skip
        register_model(ws, model_id, Path(result["model_dir"]), row, stage=stage, stage_fingerprint=stage_fp,
                       curve=result.get("log", []), leave_out=TRAINING_FILES, report=report.ledger())  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)
        log.info("trained %s (%s, %d parameters)", model_id, arch, result["parameters"])
        return report
