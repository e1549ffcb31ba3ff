"""`odqa train`: train a retriever on workspace questions/passages and register it in `models`.

Tasks:
1. `load-training-examples`: questions of NAME:SPLIT joined with the passages they reference
   (positives, hard negatives) into a Parquet examples file; questions without a known
   positive are skipped and counted.
2. `train-retriever` (holding one of the machine's `gpu` slots, `flows.plumbing.concurrency_slots`, so
   trainings and encodings queue for the devices, and a killed one frees its slot at once): runs
   the training job in-process, or under torchrun with `gpus > 1` or `nodes > 1`.
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

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from prefect import flow, task

from ...models.config import DESIRE_ME_ARCHS
from ...models.data import examples_from_tables, read_examples, referenced_passage_ids, write_examples
from ...models.desire_me_targets import check_gate_targets, with_gate_targets
from ...models.dev_eval import dev_pool
from ...models.job import TrainingJob, TrainSet, read_result, run_job
from ...models.resume import ResumeMode, checkpoint_config, resume_decision
from ...models.settings import RetrieverSettings, TrainSettings
from ...models.trainer import TrainingConfig, TrainResult, changed_auto_precision
from ...models.training_state import OPTIMIZER_FILE, RNG_FILE, STATE_FILE
from ...pipelines.questions.specs import DatasetSpec
from ...storage import Workspace
from ...storage.atomic import atomic_write_json
from ...storage.fingerprint import fingerprint
from ...storage.ids import check_model_id
from ...storage.locks import writer_lock
from ...storage.metrics import metric_order
from ...storage.model_registry import (
    model_dir,
    model_identity,
    model_is_registered,
    register_model,
    resolve_model,
    training_dir,
    training_examples_file,
)
from ...storage.passages import passages_with_ids
from ...storage.questions import load_questions
from ...storage.reports import Report
from ..plumbing.artifacts import publish_training
from ..plumbing.bounds import AtLeastOne, AtLeastZero
from ..plumbing.concurrency_slots import gpu_slot
from ..plumbing.console import tell
from ..plumbing.report_text import log_report
from ..plumbing.runtime import flow_run_logs, run_log_env
from ..plumbing.skip_unchanged import current_fingerprint, finished_report
from .positives import derive_command

LAUNCH_FILE = "launch.json"  # node 0's job is ready for the other nodes (its stage fingerprint, endpoint)
JOIN_TIMEOUT_S = 1800.0
JOIN_POLL_S = 1.0
TRAINING_FILES = frozenset({OPTIMIZER_FILE, RNG_FILE, STATE_FILE})  # checkpoint state, not part of a model


def train_stage(model_id: str) -> str:
    """The ledger name of training a model id (the pipeline checks it is still there)."""
    return f"train-{model_id}"


@dataclass
class ExamplesReport(Report):
    examples: int
    skipped: dict[str, int]
    domains: list[str]
    with_hard_negatives: int = 0  # examples with at least one hard negative
    hard_negatives_used: int = 0  # hard negatives a batch takes, summed over the examples (at most the asked count each)


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
    dev_pool: str | None = None  # what dev_metrics ranked: not the corpus (see `dev_pool_text`)
    hard_negatives: str | None = None  # how many hard negatives per question training used
    resumed: str | None = None
    passages_tokenized: int = 0  # training passages tokenized (the rest came from passage_tokens)
    passage_tokens_reused: int = 0

    spread: ClassVar[dict[str, str]] = {"dev_metrics": "dev "}

    def __post_init__(self) -> None:
        # by cut-off (R@1, R@5, R@20, R@100), also when rebuilt from the ledger's sorted JSON
        self.dev_metrics = {k: self.dev_metrics[k] for k in sorted(self.dev_metrics, key=metric_order)}


@task(name="load-training-examples")
def load_examples_task(workspace: str, dataset: str, split: str, output: str, hard_negatives: int = 0,
                       gate_targets: str = "question") -> ExamplesReport:  # fmt: skip
    ws = Workspace.resolve(workspace)
    questions = load_questions(ws, dataset, split)
    passages = passages_with_ids(ws, sorted(referenced_passage_ids(questions)))
    examples, skipped = examples_from_tables(questions, passages)
    examples = with_gate_targets(ws, examples, passages, gate_targets)
    if not examples:
        raise ValueError(no_positives_text(dataset, split, questions.num_rows, skipped))
    if answer_only := skipped.get("question_without_positive", 0):
        tell("%s:%s: %s of %s questions have no positive passage and are left out; `%s` gives them positives from "
             "their answers", dataset, split, f"{answer_only:,}", f"{questions.num_rows:,}",
             derive_command(dataset, split))  # fmt: skip
    write_examples(examples, Path(output))
    return ExamplesReport(examples=len(examples), skipped=dict(skipped),
                          domains=sorted({d for e in examples for d in e.domains}),
                          with_hard_negatives=sum(1 for e in examples if e.hard_negatives),
                          hard_negatives_used=sum(min(hard_negatives, len(e.hard_negatives)) for e in examples))  # fmt: skip


def no_positives_text(dataset: str, split: str, questions: int, skipped: Mapping[str, int]) -> str:
    """Why a question set gives no training example, and the way out: answer-only questions get
    positives by distant supervision (`odqa positives`); positive ids that name no passage need
    the passages they come from."""
    reasons = []
    if answer_only := skipped.get("question_without_positive", 0):
        reasons.append(f"{answer_only:,} have no positive passage (answer-only questions): give them positives from "
                       f"their answers with `{derive_command(dataset, split)}` (DPR's distant supervision; the `positives` "
                       "deployment in the UI)")  # fmt: skip
    if unknown := skipped.get("question_without_known_positive", 0):
        reasons.append(f"{unknown:,} name positive passages that are not in the passages table: import the passages "
                       "they come from")  # fmt: skip
    return (f"{dataset}:{split}: none of its {questions:,} questions has a positive passage in the passages table; "
            + "; ".join(reasons))  # fmt: skip


def check_has_positives(ws: Workspace, spec: DatasetSpec) -> None:
    """Refuse at once (before negatives are built or a model loaded) a question set none of whose
    questions has a positive id: an answer-only set, which `odqa positives` gives positives."""
    stored = load_questions(ws, spec.dataset, spec.split, ["positive_ids"]).column("positive_ids")
    if not any(stored.to_pylist()):
        raise ValueError(no_positives_text(spec.dataset, spec.split, len(stored),
                                           {"question_without_positive": len(stored)}))  # fmt: skip


def ensure_hard_negatives(ws: Workspace, spec: DatasetSpec, count: int) -> None:
    """A training that asks for hard negatives gets them: a split whose questions have none gets
    DPR's BM25 negatives first (`odqa negatives bm25`, `count` per question), said on the terminal;
    without a BM25 index to build them from, the training is refused naming the commands."""
    from ...pipelines.retrieval.bm25 import IndexMissingError
    from ...pipelines.retrieval.negatives import MAX_HARD_NEGATIVES
    from .negatives import bm25_negatives_flow

    stored = load_questions(ws, spec.dataset, spec.split, ["hard_negative_ids"]).column("hard_negative_ids")
    if any(stored.to_pylist()):
        return
    command = f"odqa negatives bm25 --dataset {spec.dataset} --split {spec.split} --count {count}"
    tell("%s: no question has hard negatives and %d per question were asked for; building BM25 negatives "
         "as DPR does (as `%s` would) ...", spec.name, count, command)  # fmt: skip
    try:
        bm25_negatives_flow(dataset=spec.dataset, split=spec.split, count=min(count, MAX_HARD_NEGATIVES),
                            workspace=str(ws.root))  # fmt: skip
    except IndexMissingError:
        raise ValueError(f"{spec.name} has no hard negatives and {count} per question were asked for, but there is "
                         f"no BM25 index to build them from: run `odqa bm25 index` (training then builds them, as "
                         f"`{command}` would), or train with --hard-negatives 0") from None  # fmt: skip


def hard_negatives_text(asked: int, loaded: list[dict[str, Any]]) -> str:
    """How many hard negatives per question training used, against how many were asked for."""
    examples = sum(r["examples"] for r in loaded)
    used = sum(r.get("hard_negatives_used", 0) for r in loaded)
    having = sum(r.get("with_hard_negatives", 0) for r in loaded)
    if asked == 0:
        return "none (--hard-negatives 0: in-batch negatives only)"
    return (f"{used / max(examples, 1):.2f} per question on average (asked: {asked}); "
            f"{having:,} of {examples:,} training questions have at least one")


def dev_pool_text(dev_path: str, dev: str) -> str:
    """What the dev R@K ranked: a pool, not the corpus, so the figure is not read as `odqa evaluate`'s."""
    examples = read_examples(Path(dev_path))
    return (f"{len(dev_pool(examples)):,} passages: the positives and hard negatives of the {len(examples):,} "
            f"questions of {dev} (not the full corpus: score that with odqa retrieve + evaluate)")  # fmt: skip


@dataclass(frozen=True)
class Launch:
    """Where the training processes run: ``gpus`` per node (processes on a CPU-only machine) on
    ``nodes`` machines that meet at ``rdzv_endpoint`` (HOST:PORT of node 0, which hosts the
    rendezvous); this machine is node ``node_rank``."""

    gpus: int = 1
    nodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.nodes < 1:
            raise ValueError(f"--gpus and --nodes must be at least 1, got {self.gpus} and {self.nodes}")
        if not 0 <= self.node_rank < self.nodes:
            raise ValueError(f"--node-rank must be 0..{self.nodes - 1} for --nodes {self.nodes}, got {self.node_rank}")
        if self.nodes > 1 and not re.fullmatch(r"\[?[\w.:-]+\]?:\d+", self.rdzv_endpoint or ""):
            raise ValueError(f"--nodes {self.nodes} needs --rdzv-endpoint HOST:PORT (node 0's address and a free "
                             f"port), got {self.rdzv_endpoint!r}")

    @property
    def distributed(self) -> bool:
        return self.gpus > 1 or self.nodes > 1

    def torchrun(self, job_file: str, run_id: str) -> list[str]:
        """The torchrun command of this node: `--standalone` on one machine, else a c10d
        rendezvous at the endpoint (hosted by node 0) under ``run_id``."""
        where = ["--standalone"] if self.nodes == 1 else [
            f"--nnodes={self.nodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={self.rdzv_endpoint}",
            f"--rdzv-id={run_id}", f"--rdzv-conf=is_host={int(self.node_rank == 0)}"]  # fmt: skip
        return [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc_per_node={self.gpus}",
                "-m", "odqa.flows.stages.train_worker", job_file]  # fmt: skip


def describe_devices(gpus: int) -> str | None:
    """What ``--gpus N`` (N > 1) means here, when it is not N GPUs: N processes on the CPU."""
    import torch

    available = torch.cuda.device_count()
    if gpus > 1 and not available:
        return f"no GPU on this machine: --gpus {gpus} runs {gpus} training processes on the CPU (DDP over gloo)"
    if gpus > available > 0:
        raise ValueError(f"--gpus {gpus}, but this machine has {available} GPU(s)")
    return None


@task(name="train-retriever")
def train_task(job_file: str, gpus: int, nodes: int = 1, node_rank: int = 0, rdzv_endpoint: str | None = None,
               workspace: str | None = None) -> TrainResult | None:  # fmt: skip
    """Train in this process, or under torchrun (several GPUs or machines), holding one of this
    machine's `gpu` slots for the training loop (in the name of ``workspace``, what a run waiting
    for the slot is told); returns the result rank 0 wrote (None on a joining node whose node 0
    registered the model already)."""
    job = TrainingJob.read(Path(job_file))
    launch = Launch(gpus, nodes, node_rank, rdzv_endpoint)
    with gpu_slot(f"train {Path(job_file).parent.name}", workspace):
        if launch.distributed:
            command = launch.torchrun(job_file, run_id=Path(job_file).parent.name)
            subprocess.run(command, check=True, env={**os.environ, **run_log_env()})
        else:
            run_job(job)
    result = Path(job.result_path)
    if node_rank > 0 and not result.is_file():
        return None  # node 0 registered the model and cleared the training folder already
    return read_result(result)


# Always in a training's fingerprint: the settings models had before an option entered it only
# when set (`Settings.fingerprint_params`); with `train`, `dev` and `gpus`.
FINGERPRINTED = ("arch", "base", "routing", "pooling", "freeze", "num_experts", "max_steps", "epochs", "batch_size",
                 "lr", "hard_negatives", "seed", "accumulation_steps", "eval_every", "objective", "temperature",
                 "warmup_steps")  # fmt: skip


def train_params(retriever: RetrieverSettings, training: TrainSettings, train: list[str], dev: str | None,
                 gpus: int, earlier: bool = False) -> dict[str, Any]:  # fmt: skip
    """What a training's stage fingerprint (and its checkpoint's run file) holds of its settings
    (with `earlier`: as models trained before the last change of a default have it).

    An `amp` of "auto" that now gives another precision than it did when models were first
    trained (bf16 on CPUs with bf16 units) enters as `precision`, so those models train again."""
    precision = changed_auto_precision(training.amp)
    return {**retriever.fingerprint_params(FINGERPRINTED), **training.fingerprint_params(FINGERPRINTED, earlier),
            "train": train, "dev": dev, "gpus": gpus, **({"precision": precision} if precision else {})}  # fmt: skip


@flow(name="train")
def train_flow(
    model_id: str,
    train: list[str],
    retriever: RetrieverSettings,
    training: TrainSettings,
    dev: str | None = None,
    resume: ResumeMode = "auto",
    workspace: str | None = None,
    gpus: AtLeastOne = 1,
    nodes: AtLeastOne = 1,
    node_rank: AtLeastZero = 0,
    rdzv_endpoint: str | None = None,
) -> TrainReport:
    """Train a retriever (RETRIEVER: arch, base, layout) on TRAIN sets (NAME:SPLIT[:WEIGHT]) as
    TRAINING says; register it as MODEL_ID.

    The Args below (and the field descriptions of the settings, models/settings.py) are also
    the descriptions of the `train/train` deployment's Custom run form.

    Args:
        model_id: Name of the trained model: its folder under models/ and its `models` row.
        train: Training question sets as NAME:SPLIT[:WEIGHT], e.g. trex:train; WEIGHT scales how often
            a set is drawn per epoch.
        retriever: What is trained: architecture, starting checkpoint and layout options.
        training: How it is trained: budget, batches, loss, precision and speed.
        dev: Dev questions NAME:SPLIT for R@K model selection; empty: no dev evaluation.
        resume: auto: continue from a checkpoint written for the same parameters and data (after a
            kill, or when Prefect retries the run), else start over and say why; continue: must
            continue; restart: start over.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker (`./run server` sets it to
            its workspace), else ./workspace.
        gpus: GPUs to train on; more than 1 runs torchrun (DDP).
        nodes: Machines training together (DDP across them, `gpus` processes on each); every one
            runs this same command with its own node_rank, on a workspace they share (same path).
        node_rank: This machine's number, 0..nodes-1; node 0 hosts the rendezvous, prepares the
            job and registers the model, the others join its job.
        rdzv_endpoint: HOST:PORT of node 0 where the machines meet (torchrun's c10d rendezvous);
            needed with nodes > 1.
    """
    ws = Workspace.resolve(workspace)
    if not train:
        raise ValueError("give at least one --train NAME:SPLIT[:WEIGHT]")
    check_model_id(model_id)
    check_gate_targets(retriever.arch, training.gate_targets)
    launch = Launch(gpus, nodes, node_rank, rdzv_endpoint)
    if devices := describe_devices(gpus):
        tell("%s", devices)
    arch, base = retriever.arch, retriever.base
    specs = [DatasetSpec.parse(s) for s in train]
    dev_spec = DatasetSpec.parse(dev, with_weight=False) if dev else None
    base_path = resolve_model(ws, base).path
    params = train_params(retriever, training, train, dev, gpus)
    for spec in [*specs, *([dev_spec] if dev_spec else [])]:
        check_has_positives(ws, spec)
    if training.hard_negatives > 0:
        for spec in specs:
            ensure_hard_negatives(ws, spec, training.hard_negatives)
    stage = train_stage(model_id)
    inputs = (model_identity(base_path), ws.table_version("questions"), ws.table_version("passages"))
    stage_fp = current_fingerprint(ws, stage, fingerprint(stage, params, *inputs),
                                   fingerprint(stage, train_params(retriever, training, train, dev, gpus, True), *inputs))
    if launch.node_rank > 0:  # node 0 holds the model's writer lock and registers the model
        return _join_training(ws, training_dir(ws, model_id), stage_fp, launch, TrainReport(
            model_id=model_id, arch=arch, parameters=0, path=str(model_dir(ws, model_id)), base=base, trained_on=""))
    # One training per model id: a second `odqa train --model-id` of the same id is refused, naming
    # this run, instead of training into (or deleting) the same folder.
    with writer_lock(ws.root, f"model:{model_id}", f"the model {model_id!r}"):
        done = finished_report(ws, stage, stage_fp, TrainReport, "same data and parameters as the registered model")
        if done is not None and model_is_registered(ws, model_id):
            return done
        work = training_dir(ws, model_id)
        (work / LAUNCH_FILE).unlink(missing_ok=True)  # a joining node must not take an earlier run's job
        resuming, message = resume_decision(work, model_id, stage_fp, params, resume)
        if message:
            tell("%s", message)  # the terminal too: a user must see that a run resumed, or why not
        if resuming:
            training, kept = training.continuing(checkpoint_config(work))
            if kept:
                tell("%s continues with the checkpoint's %s (the default when it began)", model_id,
                     ", ".join(f"{name}={getattr(training, name)}" for name in kept))
        train_sets, loaded = [], {}
        for spec in specs:
            path = training_examples_file(ws, model_id, "train", spec.dataset, spec.split)
            loaded[spec.name] = asdict(load_examples_task(str(ws.root), spec.dataset, spec.split, str(path),
                                                          training.hard_negatives, training.gate_targets))  # fmt: skip
            train_sets.append(TrainSet(name=spec.name, path=str(path), weight=spec.weight))
        dev_path = None
        if dev_spec:
            dev_path = str(training_examples_file(ws, model_id, "dev", dev_spec.dataset, dev_spec.split))
            loaded[dev_spec.name] = asdict(load_examples_task(str(ws.root), dev_spec.dataset, dev_spec.split, dev_path))

        domains = None
        if arch in DESIRE_ME_ARCHS:
            domains = sorted({d for s in train_sets for e in read_examples(Path(s.path)) for d in e.domains})
            if not domains:
                raise ValueError(f"{arch} needs domain labels on the training questions; run `odqa label domains` first")
        snapshots = str(Path(training.snapshot_dir).resolve()) if training.snapshot_dir else None
        config = TrainingConfig(**{**training.model_dump(), "snapshot_dir": snapshots}, output_dir=str(work))
        job = TrainingJob(arch=arch, base=base_path, training=config, train_sets=train_sets, dev_path=dev_path,
                          model_options=retriever.model_options(domains), resume=resuming,
                          result_path=str(work / "result.json"), workspace=str(ws.root))  # fmt: skip
        job_file = work / "job.json"
        job.write(job_file)
        if launch.nodes > 1:
            atomic_write_json(work / LAUNCH_FILE, {"stage_fingerprint": stage_fp, **asdict(launch)})
        with flow_run_logs():  # progress records from any thread of this process reach this run's logs
            result = train_task(str(job_file), gpus, nodes, node_rank, rdzv_endpoint, str(ws.root))

        trained_on = ",".join(f"{s.name}:{s.weight:g}" for s in train_sets)
        stored = {
            "retriever": result.retriever_config,
            "training": config.model_dump(include=set(TrainSettings.model_fields) | {"output_dir"})
            | {"gpus": gpus, "nodes": nodes},
            "train_sets": [asdict(s) | {"path": None} for s in train_sets], "data": loaded,
            "dev": {"dataset": dev, "best_step": result.best_step, "metrics": result.best_metrics,
                    "history": result.dev_history},
            "steps": result.steps, "final_loss": result.final_loss,
            "trainable_parameters": result.trainable_parameters,
            "elapsed_s": result.elapsed_s,  # training loop wall time (all sessions)
            "cpu_s": result.cpu_s,  # training process CPU time, user + system (all sessions)
        }  # fmt: skip
        row = {"arch": arch, "parameters": result.parameters, "base": base, "trained_on": trained_on,
               "config": json.dumps(stored, sort_keys=True, default=str)}  # fmt: skip
        report = TrainReport(model_id=model_id, arch=arch, parameters=result.parameters,
                             path=str(model_dir(ws, model_id)), base=base, trained_on=trained_on, steps=result.steps,
                             final_loss=round(result.final_loss, 4), dev_metrics=dict(result.best_metrics),
                             dev_pool=dev_pool_text(dev_path, dev) if dev_path and dev else None,
                             hard_negatives=hard_negatives_text(training.hard_negatives,
                                                                [loaded[s.name] for s in specs]),
                             resumed=message if resuming else None, passages_tokenized=result.passages_tokenized,
                             passage_tokens_reused=result.passage_tokens_reused)  # fmt: skip
        register_model(ws, model_id, result.model_dir, row, stage=stage, stage_fingerprint=stage_fp,
                       curve=result.log, leave_out=TRAINING_FILES, report=report.ledger())  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)
        publish_training(model_id, dev, {"step": result.best_step, "metrics": result.best_metrics},
                         result.log, result.dev_history)  # fmt: skip
        log_report(f"train {model_id}", report)
        return report


def _join_training(ws: Workspace, work: Path, stage_fp: str, launch: Launch, report: TrainReport) -> TrainReport:
    """Node ``launch.node_rank`` > 0: wait for node 0's job of the same parameters and data (its
    launch file in the shared training folder), then run this node's torchrun into its
    rendezvous. Node 0 registers the model; this node reports the steps it trained."""
    import time

    deadline = time.monotonic() + JOIN_TIMEOUT_S
    tell("node %d of %d: waiting for node 0's training job in %s", launch.node_rank, launch.nodes, work)
    while True:
        with contextlib.suppress(FileNotFoundError, ValueError):
            ready = json.loads((work / LAUNCH_FILE).read_text(encoding="utf-8"))
            if ready["stage_fingerprint"] == stage_fp and ready["rdzv_endpoint"] == launch.rdzv_endpoint:
                break
        if time.monotonic() > deadline:
            raise TimeoutError(f"node 0 did not start a training job with these parameters and data in {work} "
                               f"within {JOIN_TIMEOUT_S:.0f} s (run the same command there with --node-rank 0)")
        time.sleep(JOIN_POLL_S)
    with flow_run_logs():
        result = train_task(str(work / "job.json"), launch.gpus, launch.nodes, launch.node_rank, launch.rdzv_endpoint,
                            str(ws.root))
    if result is not None:
        report.steps, report.final_loss, report.parameters = result.steps, round(result.final_loss, 4), result.parameters
    return report
