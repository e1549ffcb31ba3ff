"""The settings of a training run, declared once: what to train (`RetrieverSettings`) and how
(`TrainSettings`).

Everything else comes from these two models: `odqa train`'s and `odqa train-rounds`' options
(`flows/cli/settings_options.py` reads the fields: a `Literal` becomes a choice, a bound a
range, the description the help), the `train` and `train-rounds` flow parameters (so the
Prefect UI forms show a dropdown for every choice and each field's description), the job file
and the trainer (`models.trainer.TrainingConfig` extends `TrainSettings`). A new option is one
field here and the code that uses it.

Fingerprints: a field enters a model's fingerprint only when it differs from its default,
unless the stage lists it as always fingerprinted (the options models had before this rule) or
the model lists it in `not_fingerprinted` (it changes the speed or the bookkeeping, not what
the trainer computes). So a new option leaves every existing model current. When a default
changes, the model records the old one in `earlier_defaults`: a fingerprint taken before the
change is `fingerprint_params(..., earlier=True)`, which the flows still accept as current.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .config import TASER_ARCHS, Arch, FreezeSide, PassageInput, Pooling, Routing

Amp = Literal["auto", "bf16", "fp16", "none"]
Objective = Literal["contrastive", "stopgrad", "flipped"]  # thesis 5.1: the loss and its two variants
GateTargets = Literal["question", "positive"]  # DESIRE-ME's gate: the paper's, or its reference code's
OBJECTIVES: tuple[str, ...] = get_args(Objective)


@dataclass(frozen=True)
class Cli:
    """A field's command-line spelling, where it is not ``--field-name``."""

    flag: str


class Settings(BaseModel):
    """Fingerprint rule shared by the settings models (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # an lr of inf trains to nan losses

    not_fingerprinted: ClassVar[frozenset[str]] = frozenset()
    earlier_defaults: ClassVar[dict[str, Any]] = {}  # field -> its default before the current one

    @classmethod
    def defaults(cls, earlier: bool = False) -> dict[str, Any]:
        """Every field's default (with `earlier`: as it was before a default changed)."""
        current = {name: info.get_default(call_default_factory=True) for name, info in cls.model_fields.items()
                   if not info.is_required()}  # fmt: skip
        return {**current, **cls.earlier_defaults} if earlier else current

    def fingerprint_params(self, always: Iterable[str], earlier: bool = False) -> dict[str, Any]:
        """The fields that define what is trained: those in `always`, and every other one that is
        set to something other than its default (and not in `not_fingerprinted`). With `earlier`,
        the defaults before the last change of one: the fingerprint models trained then have."""
        always, defaults = set(always), self.defaults(earlier)
        return {name: value for name, value in self.model_dump().items()
                if name in always or (name not in self.not_fingerprinted
                                      and (name not in defaults or value != defaults[name]))}  # fmt: skip


class RetrieverSettings(Settings):
    """What is trained: the architecture, its starting checkpoint and its layout options."""

    arch: Arch = Field(description="Retriever architecture (bi-encoders dpr, sde, ade-*; taser, taser-shared; "
                       "desire-me and rnd-g on top of a trained retriever)")  # fmt: skip
    base: str = Field(description="Starting checkpoint: a Hugging Face name, a folder, or (desire-me, rnd-g) a "
                      "model id registered in this workspace")  # fmt: skip
    routing: Routing = Field(default="det", description="TASER expert routing: det (deterministic), seq (per "
                             "sequence) or tok (per token)")  # fmt: skip
    num_experts: Annotated[int | None, Cli("--experts")] = Field(
        default=None, ge=1, description="TASER experts per specialized block; empty: 2")
    pooling: Pooling | None = Field(default=None, description="cls or mean; empty: the checkpoint's "
                                    "sentence-transformers setting, else cls")  # fmt: skip
    passage_input: PassageInput = Field(default="pair", description="pair (title, text), as DPR; or "
                                        "joined-lowercase, one lowercased 'title text' string, as DESIRE-ME's code")  # fmt: skip
    freeze: FreezeSide | None = Field(default=None, description="Freeze one tower of a two-tower model: "
                                      "question or passage (thesis fixQ / fixP); empty: train both")  # fmt: skip

    def model_options(self, domains: list[str] | None = None) -> dict[str, Any]:
        """`create_retriever`'s keyword arguments (`domains`: DESIRE-ME's labels, which wrap a
        trained retriever and take only its pooling and passage input)."""
        if domains is not None:
            return {"pooling": self.pooling, "domains": domains, "passage_input": self.passage_input}
        options: dict[str, Any] = {"pooling": self.pooling, "freeze": self.freeze, "passage_input": self.passage_input}
        if self.arch in TASER_ARCHS:
            options.update(routing=self.routing, num_experts=self.num_experts)
        return options


class TrainSettings(Settings):
    """How it is trained: budget, batches, loss, precision and speed (defaults follow DPR/TASER)."""

    not_fingerprinted: ClassVar[frozenset[str]] = frozenset(
        {"checkpoint_minutes", "threads", "snapshot_every", "snapshot_dir"})
    # Length buckets became the default on 2026-11-26 (benchmarks/RESULTS.md, "Bucketed training
    # by default"): the same loss, at 1.6-1.7x the examples per CPU second in bf16.
    earlier_defaults: ClassVar[dict[str, Any]] = {"bucket_tokens": None}

    max_steps: int | None = Field(default=None, ge=1, description="Optimizer steps; give this or epochs, not both")
    epochs: int | None = Field(default=None, ge=1, description="Epochs over the training sets, instead of max_steps")
    batch_size: int = Field(default=16, ge=1, description="Questions per device and micro-batch")
    lr: float = Field(default=2e-5, gt=0, description="Peak learning rate (AdamW, linear warmup and decay)")
    hard_negatives: int = Field(default=1, ge=0, description="Hard negative passages per question")
    accumulation_steps: Annotated[int, Cli("--accumulation")] = Field(
        default=1, ge=1, description="Gradient accumulation micro-batches per optimizer step")
    warmup_steps: int | None = Field(default=None, ge=0, description="Learning-rate warmup steps; empty: 10% of "
                                     "the steps")  # fmt: skip
    eval_every: int | None = Field(default=None, ge=1, description="Dev evaluation interval in steps; empty: at the "
                                   "end only")  # fmt: skip
    objective: Objective = Field(default="contrastive", description="Training loss: contrastive, stopgrad or "
                                 "flipped (thesis 5.1 variants)")  # fmt: skip
    temperature: float | None = Field(default=None, gt=0, description="Softmax temperature; empty: 1 for dot "
                                      "product, 0.05 for cosine")  # fmt: skip
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="Random seed of sampling and initialisation")
    amp: Amp = Field(default="auto", description="Mixed precision: auto (bf16/fp16 autocast on GPU, bf16 on CPUs "
                     "with bf16 matrix units, about 2x faster per step, else full precision), bf16, fp16 (GPU only) "
                     "or none")  # fmt: skip
    bucket_tokens: int | None = Field(default=2048, ge=1, description="Encode each micro-batch in length-sorted "
                                      "buckets of at most this many padded tokens: the same loss with less padding; "
                                      "none: one block padded to its longest passage")  # fmt: skip
    grad_cache: bool = Field(default=False, description="Cached-gradient (GradCache) steps over the buckets: the "
                             "memory of one bucket whatever the batch size, about 1.3x the compute; needs "
                             "bucket_tokens")  # fmt: skip
    mask_duplicates: bool = Field(default=False, description="Another copy of a question's positive passage in the "
                                  "batch (two questions on one paragraph, a hard negative that is another "
                                  "question's positive) is not counted as its negative")  # fmt: skip
    layer_decay: float | None = Field(default=None, gt=0, le=1, description="Layer-wise learning-rate decay D "
                                      "(TASER's reference configs: 0.8): block i of L trains at lr times D^(L+1-i), "
                                      "the embeddings at lr times D^(L+2); empty: none (as the papers)")  # fmt: skip
    loss_weights: list[float] | None = Field(default=None, min_length=2, max_length=2, description="Weights of the "
                                             "similarity loss and of the model's auxiliary loss (DESIRE-ME's gate "
                                             "BCE, TASER's entropy term); empty: 1 and 1. DESIRE-ME's reference "
                                             "code: 0.5, 0.5")  # fmt: skip
    gate_targets: GateTargets = Field(default="question", description="What DESIRE-ME's gate learns: question "
                                      "(the question's domains, its positives' union, as the paper) or positive "
                                      "(those of the positive passage it trains on, as the reference code)")  # fmt: skip
    checkpoint_minutes: float | None = Field(default=10.0, gt=0, description="Wall time between resumable "
                                             "checkpoints (one is also written at the end); empty: only at the end")  # fmt: skip
    threads: int | None = Field(default=None, ge=1, description="Torch threads for training; empty: torch's "
                                "default (one per core)")  # fmt: skip
    snapshot_every: int | None = Field(default=None, ge=1, description="Keep a copy of the model every this many "
                                       "steps, with the wall and CPU time spent to reach it (quality-vs-cost "
                                       "curves); empty: none")  # fmt: skip
    snapshot_dir: str | None = Field(default=None, description="Where snapshots go; empty: inside the training "
                                     "folder, removed once the model is registered")  # fmt: skip

    @model_validator(mode="after")
    def _consistent(self) -> TrainSettings:
        if (self.max_steps is None) == (self.epochs is None):
            raise ValueError("give exactly one of max_steps (--max-steps) or epochs (--epochs)")
        if self.loss_weights is not None and min(self.loss_weights) < 0:
            raise ValueError(f"loss_weights must be two weights >= 0 (similarity, auxiliary), got {self.loss_weights}")
        if self.loss_weights is not None and self.grad_cache:
            raise ValueError("loss_weights weigh an auxiliary loss, which grad_cache training does not support")
        if self.grad_cache and not self.bucket_tokens:
            raise ValueError("grad_cache re-encodes the batch bucket by bucket: give bucket_tokens too")
        return self

    # Checked between a checkpoint and its resumption: the settings that change the sequence of
    # batches and losses. Checkpoints were first written with the first seven; one written
    # before a later one existed was trained with that one's default.
    resumed_since_first: ClassVar[tuple[str, ...]] = (
        "batch_size", "hard_negatives", "accumulation_steps", "seed", "objective", "max_steps", "epochs")
    resumed_since_added: ClassVar[tuple[str, ...]] = (
        "bucket_tokens", "grad_cache", "mask_duplicates", "layer_decay", "loss_weights")

    def resume_signature(self) -> dict[str, Any]:
        """Settings that must not change between a checkpoint and its resumption."""
        return {k: getattr(self, k) for k in (*self.resumed_since_first, *self.resumed_since_added)}

    @classmethod
    def legacy_signature(cls) -> dict[str, Any]:
        """The signature entries a checkpoint written before they existed was trained with (their
        defaults of that time)."""
        defaults = cls.defaults(earlier=True)
        return {k: defaults[k] for k in cls.resumed_since_added}

    def continuing(self, checkpoint_config: dict[str, Any]) -> tuple[TrainSettings, list[str]]:
        """These settings for continuing a checkpoint written with `checkpoint_config`: a field
        whose default changed since, left at its default now, keeps the value the checkpoint was
        trained with (its default then), so the training ends as it began. Returns the settings
        and the names of the fields that kept the checkpoint's value."""
        current = self.defaults()
        kept = {name: old for name, old in self.earlier_defaults.items()
                if getattr(self, name) == current[name] != old and checkpoint_config.get(name, old) == old}
        return (self.model_copy(update=kept) if kept else self), sorted(kept)
