"""Training loop for every retriever: contrastive objectives, multi-set data, exact resume, DDP.

- AdamW with linear warmup and linear decay to zero, gradient clipping, gradient accumulation.
- AMP on GPU (bf16 where supported, else fp16 with a loss scaler). On CPU, `amp="auto"` keeps
  full precision (results then do not depend on the CPU model); `amp="bf16"` opts into bf16
  autocast, about 2x faster per step on CPUs with native bf16 matrix units (AMX, AVX512-BF16).
- In-batch negatives: each question is scored against the positives and hard negatives of the
  whole (global, under torchrun) micro-batch.
- Dev R@K every `eval_every` steps and at the end; the best model is kept in `<output>/best`.
- `<output>/checkpoint` always holds the latest resumable state (weights, optimizer, schedule,
  RNG states, data position), written atomically (temporary folder, rename) and without
  pickle, every `checkpoint_minutes` of wall time (default 10), every `checkpoint_every` steps
  if given, and at the end; only the latest is kept. Given the same data, config and seed,
  N steps + resume + N steps equals 2N steps straight through on CPU.
- A step whose loss or gradient norm is not finite is not applied (it would write nan into the
  weights and AdamW's moments). In full precision or bf16 the run then stops with
  `TrainingDiverged`, naming the step and the settings to change; under fp16 the loss scaler
  skips overflowing steps itself, and the run stops after `MAX_SKIPPED_STEPS` in a row.
- Progress (`pipelines.progress`): a bar on a terminal, rate-limited log records off it, with
  loss, learning rate and examples/s; at every step the same figures go to the checkpoint's
  `log` (the `training_log` table once the model is registered, and the loss curve of the train
  run's artifact), so every loss the run's log shows is a point of that curve.
"""

from __future__ import annotations

import contextlib
import math
import random
import re
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..pipelines.cpu_features import cpu_has_bf16_units
from ..pipelines.dense.divergence import TrainingDiverged
from ..pipelines.progress import Progress
from ..storage.atomic import atomic_write_json, replace_directory
from .base import WEIGHTS_NAME, Retriever, load_weights
from .config import DESIRE_ME_ARCHS
from .data import Batch, MultiSetSampler, StoredPassageTokens, TrainingExample, collate, derived_seed
from .dev_eval import DevEvaluator
from .distributed import (
    DistributedContext,
    any_rank,
    barrier,
    gather_with_local_grad,
    init_distributed,
    main_decides,
)
from .grad_cache import cached_forward_backward, supports_grad_cache
from .losses import duplicate_positive_mask, objective
from .settings import TrainSettings
from .training_state import CHECKPOINT_DIR, is_checkpoint, read_training_files, write_training_files

SNAPSHOT_FILE = "snapshot.json"  # in each snapshot folder: step, elapsed_s, cpu_s, examples, precision
# fp16 steps the loss scaler may skip in a row: each halves its scale, from 2**16 down to 2**-8,
# where even a tiny gradient overflows only because the weights or the loss already are inf/nan.
MAX_SKIPPED_STEPS = 24


class TrainingConfig(TrainSettings):
    """One training run: the user's `TrainSettings` plus where it writes and the loop's own
    knobs (callers and tests set these; the CLI and flows do not offer them)."""

    output_dir: str
    weight_decay: float = 0.0
    max_grad_norm: float = 2.0
    checkpoint_every: int | None = None  # steps; default: eval_every (besides the time-based ones)
    select_metric: str = "R@20"
    device: str | None = None
    progress: bool = True


@dataclass
class TrainResult:
    steps: int
    epoch: int
    final_loss: float
    parameters: int
    trainable_parameters: int
    model_dir: Path
    checkpoint_dir: Path
    best_metrics: dict[str, float] = field(default_factory=dict)
    best_step: int | None = None
    dev_history: list[dict[str, Any]] = field(default_factory=list)
    examples_per_second: float = 0.0
    log: list[dict[str, float]] = field(default_factory=list)  # step, loss, lr, examples_per_s, elapsed_s, cpu_s
    elapsed_s: float = 0.0  # training wall time over all sessions
    cpu_s: float = 0.0  # training process CPU time (user + system, all threads) over all sessions
    retriever_config: dict[str, Any] = field(default_factory=dict)  # the trained model's config.json
    passages_tokenized: int = 0  # training passages tokenized for this job (the rest read from passage_tokens)
    passage_tokens_reused: int = 0  # training passages whose token ids came from the passage_tokens table


class WarmupLinearSchedule:
    """Learning-rate factor: linear warmup to 1, then linear decay to 0 at `total` steps."""

    def __init__(self, warmup: int, total: int) -> None:
        self.warmup = warmup
        self.total = total

    def factor(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        return max(0.0, (self.total - step) / max(1, self.total - self.warmup))


_LAYER = re.compile(r"(?:^|\.)layer\.(\d+)\.")


def layer_lr_scale(name: str, layers: int, decay: float) -> float:
    """Learning-rate factor of parameter `name` under layer-wise decay (TASER's reference configs).

    Depth counts from the bottom as in microsoft/taser's `get_layer_lrs` (offset 2): token
    embeddings 0, Transformer block i at i + 1, everything above the blocks (projections) at
    layers + 2; the factor is decay ** (layers + 2 - depth), so the top block trains at
    decay ** 2, the embeddings at decay ** (layers + 2) and a projection head at the full rate."""
    match = _LAYER.search(name)
    if match:
        depth = int(match.group(1)) + 1
    elif ".embeddings." in f".{name}":
        depth = 0
    else:
        depth = layers + 2
    return decay ** (layers + 2 - depth)


def parameter_groups(model: nn.Module, weight_decay: float, layer_decay: float | None = None) -> list[dict[str, Any]]:
    """Trainable parameters; biases and LayerNorm weights get no weight decay (BERT practice).

    With `layer_decay`, parameters are also grouped by their learning-rate factor (`lr_scale`,
    see `layer_lr_scale`), which `optimizer_step` multiplies into the scheduled rate."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    layers = 1 + max((int(m.group(1)) for n, _ in named if (m := _LAYER.search(n))), default=-1)
    groups: dict[tuple[bool, float], list[nn.Parameter]] = {}
    for name, parameter in named:
        decays = not (name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name)
        scale = 1.0 if layer_decay is None else layer_lr_scale(name, layers, layer_decay)
        groups.setdefault((decays, scale), []).append(parameter)
    return [{"params": params, "weight_decay": weight_decay if decays else 0.0, "lr_scale": scale}
            for (decays, scale), params in sorted(groups.items(), key=lambda item: (not item[0][0], -item[0][1]))]  # fmt: skip


def make_optimizer(
    model: nn.Module, learning_rate: float, weight_decay: float, device: torch.device,
    layer_decay: float | None = None,
) -> torch.optim.AdamW:  # fmt: skip
    """AdamW over the trainable parameters; the fused kernel on CPU/CUDA (about 6x faster on CPU
    than the per-tensor loop for a MiniLM bi-encoder, same update rule)."""
    fused = device.type in ("cpu", "cuda")
    groups = parameter_groups(model, weight_decay, layer_decay)
    return torch.optim.AdamW(groups, lr=learning_rate, fused=fused or None)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def amp_dtype(mode: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of `mode` on `device`, or None for full precision.

    "auto" is bf16 (else fp16) on a GPU, bf16 on a CPU with native bf16 units (about 2x faster
    per step, same dev R@K on the quality benchmark) and full precision on other CPUs."""
    if mode == "none":
        return None
    if device.type == "cuda":
        if mode == "bf16" or (mode == "auto" and torch.cuda.is_bf16_supported()):
            return torch.bfloat16
        return torch.float16
    if mode == "bf16":
        return torch.bfloat16
    if mode == "fp16":
        raise ValueError(f"amp='fp16' needs a CUDA device (got {device}); use amp='bf16' on CPU")
    return torch.bfloat16 if cpu_has_bf16_units() else None


def precision_name(dtype: torch.dtype | None) -> str:
    """"float32", "bfloat16" or "float16": the arithmetic a run's forward passes use."""
    return str(dtype or torch.float32).removeprefix("torch.")


def changed_auto_precision(amp: str, device: str | None = None) -> str | None:
    """The precision `amp` now gives on this machine's training device where it differs from what
    the same setting gave before "auto" meant bf16 on CPUs with bf16 units; None elsewhere.

    A training stage's fingerprint includes it, so models trained before that change stay
    current wherever the arithmetic did not change, and are trained again where it did."""
    use_cuda = torch.cuda.is_available() if device is None else device.startswith("cuda")
    target = torch.device("cuda" if use_cuda else "cpu")
    now = precision_name(amp_dtype(amp, target))
    return now if now != legacy_precision({"amp": amp}, target) else None


def legacy_precision(saved_config: dict[str, Any], device: torch.device) -> str:
    """The precision a checkpoint written before precision was recorded used: "auto" meant full
    precision on every CPU then."""
    mode = saved_config.get("amp", "auto")
    if device.type == "cpu" and mode == "auto":
        return precision_name(None)
    return precision_name(amp_dtype(mode, device))


def wrap_for_training(model: Retriever, context: DistributedContext) -> nn.Module:
    """The module the training step calls: `model` itself, or its DDP wrapper under torchrun.

    Learned TASER routing may leave an expert unused in a batch, so DDP must look for unused
    parameters there; every other architecture uses all its trainable parameters each step.
    Gradients are views into DDP's all-reduce buckets, which saves copying every gradient into
    a bucket and back each step (see `zero_gradients`)."""
    if not context.enabled:
        return model
    learned_routing = model.config.taser is not None and model.config.taser.routing != "det"
    return DistributedDataParallel(
        model,
        device_ids=[context.device.index] if context.device.type == "cuda" else None,
        find_unused_parameters=learned_routing,
        gradient_as_bucket_view=True,
    )


def zero_gradients(optimizer: torch.optim.Optimizer, context: DistributedContext) -> None:
    """Clear gradients before a step: freed in a single process (backward then writes fresh
    ones instead of adding to zeros); zeroed in place under DDP, where they are bucket views
    that setting them to None would detach, bringing the bucket copies back."""
    optimizer.zero_grad(set_to_none=not context.enabled)


def forward_backward(
    wrapped: nn.Module,
    batch: Batch,
    context: DistributedContext,
    loss_function: Callable[..., torch.Tensor],
    temperature: float,
    amp: torch.dtype | None,
    scaler: torch.amp.GradScaler,
    accumulation_steps: int = 1,
    sync: bool = True,
    mask_duplicates: bool = False,
    loss_weights: Sequence[float] = (1.0, 1.0),
) -> tuple[float, dict[str, float]]:
    """Forward, contrastive loss over the (global) in-batch and hard negatives, backward.

    Gradients accumulate into `.grad`; with `sync=False` under DDP they stay local (no_sync),
    for all micro-batches but the last of an accumulated optimizer step. `mask_duplicates`:
    other copies of a question's positive passage in the (global) batch are not its negatives.
    `loss_weights` multiply the similarity loss and the model's auxiliary loss (DESIRE-ME's
    reference code trains on 0.5 * CE + 0.5 * BCE; its paper and odqa on their sum)."""
    no_sync = wrapped.no_sync() if (context.enabled and not sync) else contextlib.nullcontext()
    with no_sync:
        with torch.autocast(context.device.type, dtype=amp or torch.float32, enabled=amp is not None):
            output = wrapped(batch.question_inputs, batch.passage_inputs, batch.domain_targets)
        questions, _ = gather_with_local_grad(output.questions.float(), context)
        passages, offset = gather_with_local_grad(output.passages.float(), context)
        targets, _ = gather_with_local_grad(batch.positive_index + offset, context)
        exclude = None
        if mask_duplicates:
            keys, _ = gather_with_local_grad(batch.passage_keys, context)
            exclude = duplicate_positive_mask(keys, targets)
        similarity_loss = loss_function(questions, passages, targets, temperature, exclude) * loss_weights[0]
        # Each rank back-propagates into its own shard only; DDP averages, so scale back up.
        loss = similarity_loss * context.world_size
        total = similarity_loss.detach()
        if output.aux_loss is not None:
            aux = output.aux_loss * loss_weights[1]
            loss = loss + aux
            total = total + aux.detach()
        scaler.scale(loss / accumulation_steps).backward()
    return float(total), output.stats


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    learning_rate: float,
    max_grad_norm: float,
    loss_finite: bool = True,
) -> tuple[bool, float]:
    """Set the learning rate, unscale, clip the global norm of the optimizer's gradients, update.

    Returns whether the update was applied and the gradients' norm before clipping. An update
    is left out when the norm or the loss (`loss_finite`, every rank's) is not finite; under
    fp16 the scaler decides from the gradients, and lowers its scale when it skips. Under DDP
    the gradients are all-reduced before this, so every rank sees the same norm."""
    for group in optimizer.param_groups:
        group["lr"] = learning_rate * group.get("lr_scale", 1.0)
    scaler.unscale_(optimizer)
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    if max_grad_norm > 0:
        norm = nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    else:
        norm = nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None])
    norm_value = float(norm)
    if scaler.is_enabled():
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        return loss_finite and scaler.get_scale() >= scale, norm_value
    if not (loss_finite and math.isfinite(norm_value)):
        return False, norm_value
    optimizer.step()
    return True, norm_value


def diverged_message(step: int, total: int, loss: float, norm: float, config: TrainingConfig,
                     previous_loss: float | None, precision: str, skipped: int = 1) -> str:  # fmt: skip
    """Why training stopped at `step` (1-based), and what to change: what a user reads instead
    of a model registered with a loss of nan."""
    before = f" (the step before: {previous_loss:.4g})" if previous_loss is not None else ""
    fp16 = f" the fp16 loss scaler skipped {skipped} steps in a row;" if skipped > 1 else ""
    amp = f", or train with --amp none (now {precision})" if precision != "float32" else ""
    return (
        f"training diverged at step {step} of {total}:{fp16} the loss is {loss:.4g}{before} and the gradients' "
        f"norm {norm:.4g}. That update was not applied and no model is registered. Lower --lr (now "
        f"{config.lr:g}){amp}; a run with other settings starts over"
    )


class Trainer:
    """Trains `retriever` on `data`; see the module docstring."""

    def __init__(
        self,
        retriever: Retriever,
        data: MultiSetSampler,
        config: TrainingConfig,
        evaluator: DevEvaluator | None = None,
        stored_tokens: StoredPassageTokens | None = None,
    ) -> None:
        self.retriever = retriever
        self.data = data
        self.config = config
        self.evaluator = evaluator
        self.stored_tokens = stored_tokens  # the passages' token ids, gathered instead of tokenized per step
        self.output_dir = Path(config.output_dir)
        self.checkpoint_dir = self.output_dir / CHECKPOINT_DIR
        self.best_dir = self.output_dir / "best"
        self.temperature = config.temperature or (0.05 if retriever.similarity == "cosine" else 1.0)
        self.loss_function = objective(config.objective)
        self.domains = retriever.config.desire_me.domains if retriever.arch in DESIRE_ME_ARCHS else None
        if config.grad_cache and not supports_grad_cache(retriever):
            raise ValueError(
                f"grad_cache: {retriever.arch} adds a batch-wide auxiliary loss (learned TASER routing or "
                "DESIRE-ME gating) that cached-gradient steps cannot split by bucket; train it without grad_cache"
            )
        self.snapshot_dir = Path(config.snapshot_dir) if config.snapshot_dir else self.output_dir / "snapshots"

    # --- public ------------------------------------------------------------------------------
    def train(self, resume: bool = False, stop_at_step: int | None = None) -> TrainResult:
        """Run (or, with `resume`, continue) training; `stop_at_step` ends this call early at that
        optimizer step with a checkpoint, e.g. to fit a time-limited job; the schedule still
        spans the full run, so a later `train(resume=True)` continues exactly."""
        config = self.config
        threads_before = torch.get_num_threads()
        if config.threads:
            torch.set_num_threads(config.threads)
        try:
            return self._train(resume, stop_at_step)
        finally:
            torch.set_num_threads(threads_before)

    def _train(self, resume: bool, stop_at_step: int | None) -> TrainResult:
        config = self.config
        context = init_distributed(config.device)
        if config.grad_cache and context.enabled:
            raise ValueError("grad_cache runs in one process for now; train without it under torchrun (--gpus > 1)")
        seed_everything(config.seed)
        model = self.retriever.to(context.device)
        model.train()
        wrapped = wrap_for_training(model, context)
        optimizer = make_optimizer(model, config.lr, config.weight_decay, context.device,
                                   config.layer_decay)
        micro = config.batch_size * context.world_size
        per_step = micro * config.accumulation_steps
        steps_per_epoch = self.data.epoch_size // per_step
        if steps_per_epoch == 0:
            raise ValueError(
                f"an epoch has {self.data.epoch_size} examples, fewer than one optimizer step needs "
                f"({config.batch_size} x {context.world_size} devices x {config.accumulation_steps} accumulation)"
            )
        total = config.max_steps or config.epochs * steps_per_epoch
        warmup = config.warmup_steps if config.warmup_steps is not None else total // 10
        schedule = WarmupLinearSchedule(warmup, total)
        autocast_dtype = amp_dtype(config.amp, context.device)
        scaler = torch.amp.GradScaler("cuda", enabled=autocast_dtype == torch.float16)

        state: dict[str, Any] = {
            "step": 0,
            "epoch": 0,
            "position": 0,
            "best": None,
            "dev_history": [],
            "log": [],  # one entry per step: step, loss, lr, examples_per_s, elapsed_s, cpu_s
            "elapsed_s": 0.0,  # training wall time over all sessions (resumes included)
            "cpu_s": 0.0,  # training process CPU time (user + system) over all sessions
            "total_steps": total,
            "precision": precision_name(autocast_dtype),
        }
        if resume and is_checkpoint(self.checkpoint_dir):
            state.update(self._resume(model, optimizer, scaler, context))

        epoch_order = self.data.epoch_order(state["epoch"])
        bar = Progress(total, f"train {model.arch}", "step", initial=state["step"],
                       enabled=config.progress and context.is_main)  # fmt: skip
        started, seen, last_loss, skipped = time.perf_counter(), 0, float("nan"), 0
        cpu_started = time.process_time()
        elapsed_before, cpu_before = state["elapsed_s"], state["cpu_s"]
        last_checkpoint = time.monotonic()
        end = total if stop_at_step is None else min(total, stop_at_step)
        try:
            while state["step"] < end:
                zero_gradients(optimizer, context)
                step_loss, stats = 0.0, {}
                for part in range(config.accumulation_steps):
                    if state["position"] + micro > len(epoch_order):
                        state["epoch"] += 1
                        state["position"] = 0
                        epoch_order = self.data.epoch_order(state["epoch"])
                    window = epoch_order[state["position"] : state["position"] + micro]
                    mine = window[context.rank * config.batch_size : (context.rank + 1) * config.batch_size]
                    batch_seed = derived_seed(config.seed, state["epoch"], state["position"], context.rank)
                    state["position"] += micro
                    examples = [self.data.example(pair) for pair in mine]
                    sync = part == config.accumulation_steps - 1 or not context.enabled
                    loss_value, stats = self._micro_step(
                        wrapped, examples, batch_seed, context, autocast_dtype, scaler, sync
                    )
                    step_loss += loss_value / config.accumulation_steps
                    seen += micro
                learning_rate = config.lr * schedule.factor(state["step"])
                loss_finite = not any_rank(not math.isfinite(step_loss), context)
                applied, norm = optimizer_step(optimizer, scaler, learning_rate, config.max_grad_norm, loss_finite)
                skipped = 0 if applied else skipped + 1
                if skipped and (not scaler.is_enabled() or skipped >= MAX_SKIPPED_STEPS):
                    previous = state["log"][-1]["loss"] if state["log"] else None
                    raise TrainingDiverged(diverged_message(state["step"] + 1, total, step_loss, norm, config,
                                                            previous, state["precision"], skipped))  # fmt: skip
                state["step"] += 1
                last_loss = step_loss
                session_s = time.perf_counter() - started
                state["elapsed_s"] = elapsed_before + session_s
                state["cpu_s"] = cpu_before + time.process_time() - cpu_started
                rate = seen / max(session_s, 1e-9)
                # every step: so the curve holds each loss a progress record (or a bar) showed
                state["log"].append({"step": state["step"], "loss": step_loss, "lr": learning_rate,
                                     "examples_per_s": rate, "elapsed_s": state["elapsed_s"],
                                     "cpu_s": state["cpu_s"]})  # fmt: skip
                bar.update(1, loss=step_loss, lr=learning_rate, examples_per_s=round(rate, 1), **stats)
                done = state["step"] == total
                if config.snapshot_every and (done or state["step"] % config.snapshot_every == 0):
                    self._snapshot(model, state, context)
                if self.evaluator is not None and (
                    done or (config.eval_every and state["step"] % config.eval_every == 0)
                ):
                    self._evaluate(model, state, context)
                if self._checkpoint_due(state["step"], end, last_checkpoint, context):
                    self._checkpoint(model, optimizer, scaler, state, context)
                    last_checkpoint = time.monotonic()
        except BaseException:
            bar.close(failed=True)
            raise
        bar.close()
        best = state["best"] or {}
        model_dir = self.best_dir if best and self.best_dir.is_dir() else self.checkpoint_dir
        return TrainResult(
            steps=state["step"],
            epoch=state["epoch"],
            final_loss=last_loss,
            parameters=model.parameter_count(),
            trainable_parameters=model.parameter_count(trainable_only=True),
            model_dir=model_dir,
            checkpoint_dir=self.checkpoint_dir,
            best_metrics=dict(best.get("metrics", {})),
            best_step=best.get("step"),
            dev_history=list(state["dev_history"]),
            examples_per_second=seen / max(time.perf_counter() - started, 1e-9),
            log=list(state["log"]),
            elapsed_s=state["elapsed_s"],
            cpu_s=state["cpu_s"],
        )

    # --- steps -------------------------------------------------------------------------------
    def _micro_step(
        self,
        wrapped: nn.Module,
        examples: list[TrainingExample],
        batch_seed: int,
        context: DistributedContext,
        amp: torch.dtype | None,
        scaler: torch.amp.GradScaler,
        sync: bool,
    ) -> tuple[float, dict[str, float]]:
        config = self.config
        batch = collate(self.retriever, examples, config.hard_negatives, batch_seed, self.domains,
                        bucket_tokens=config.bucket_tokens, bucket_questions=config.grad_cache,
                        stored=self.stored_tokens)  # fmt: skip
        if config.grad_cache:
            batch = batch.to(context.device)
            exclude = duplicate_positive_mask(batch.passage_keys, batch.positive_index) if config.mask_duplicates else None
            return cached_forward_backward(self.retriever, batch, context.device, self.loss_function, self.temperature,
                                           amp, scaler, config.accumulation_steps, exclude)  # fmt: skip
        return forward_backward(
            wrapped,
            batch.to(context.device),
            context,
            self.loss_function,
            self.temperature,
            amp,
            scaler,
            self.config.accumulation_steps,
            sync,
            config.mask_duplicates,
            config.loss_weights or (1.0, 1.0),
        )

    # --- evaluation and checkpoints ------------------------------------------------------------
    def _checkpoint_due(self, step: int, end: int, last: float, context: DistributedContext) -> bool:
        """At the end of this call, every `checkpoint_every` (else `eval_every`) steps, and when
        `checkpoint_minutes` have passed since the last one (rank 0's clock decides for all)."""
        every = self.config.checkpoint_every or self.config.eval_every
        if step == end or (every and step % every == 0):
            return True
        minutes = self.config.checkpoint_minutes
        return main_decides(minutes is not None and time.monotonic() - last >= minutes * 60, context)

    def _snapshot(self, model: Retriever, state: dict[str, Any], context: DistributedContext) -> None:
        """Keep a copy of the model at this step with the training cost spent to reach it, so
        quality can be plotted against wall and CPU time after the run."""
        if context.is_main:
            folder = model.save_pretrained(self.snapshot_dir / f"step-{state['step']:07d}")
            document = {key: state[key] for key in ("step", "epoch", "elapsed_s", "cpu_s", "precision")}
            document["examples"] = state["step"] * self.config.batch_size * context.world_size * (
                self.config.accumulation_steps
            )
            atomic_write_json(folder / SNAPSHOT_FILE, document)
        barrier(context)

    def _evaluate(self, model: Retriever, state: dict[str, Any], context: DistributedContext) -> None:
        if context.is_main:
            metrics = self.evaluator(model)
            state["dev_history"].append({"step": state["step"], **metrics})
            key = self.config.select_metric if self.config.select_metric in metrics else next(iter(metrics))
            best = state["best"]
            if best is None or metrics[key] > best["metrics"][key]:
                state["best"] = {"step": state["step"], "metric": key, "metrics": metrics}
                model.save_pretrained(self.best_dir)
        barrier(context)

    def _checkpoint(
        self,
        model: Retriever,
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler,
        state: dict[str, Any],
        context: DistributedContext,
    ) -> None:
        if context.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            staging = self.output_dir / f".checkpoint.tmp-{uuid.uuid4().hex}"
            staging.mkdir()
            try:
                model.write_model_files(staging)
                document = {
                    **state,
                    "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "scaler": scaler.state_dict(),
                    "config": self.config.model_dump(),
                    "signature": self._signature(context),
                }
                write_training_files(staging, optimizer, document)
                replace_directory(staging, self.checkpoint_dir)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        barrier(context)

    def _resume(
        self,
        model: Retriever,
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler,
        context: DistributedContext,
    ) -> dict[str, Any]:
        folder = self.checkpoint_dir
        expected = self._signature(context)
        saved, optimizer_state = read_training_files(folder)
        saved["signature"]["training"] = {**TrainSettings.legacy_signature(), **saved["signature"]["training"]}
        saved["signature"].setdefault("precision", legacy_precision(saved.get("config", {}), context.device))
        if saved["signature"] != expected:
            raise ValueError(
                f"{folder}: checkpoint was written for different settings or data; "
                f"saved {saved['signature']}, now {expected}"
            )
        load_weights(model, folder / WEIGHTS_NAME)
        optimizer.load_state_dict(optimizer_state)
        if saved.get("scaler"):
            scaler.load_state_dict(saved["scaler"])
        keys = ("step", "epoch", "position", "best", "dev_history", "log", "elapsed_s", "cpu_s")
        return {k: saved[k] for k in keys if k in saved}  # log, elapsed_s, cpu_s: newer checkpoints only

    def _signature(self, context: DistributedContext) -> dict[str, Any]:
        """What a checkpoint must have been written with to continue exactly."""
        return {
            "training": self.config.resume_signature(),
            "data": self.data.signature(),
            "world_size": context.world_size,
            "precision": precision_name(amp_dtype(self.config.amp, context.device)),
        }
