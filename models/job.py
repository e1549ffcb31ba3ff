"""A training job described by one JSON file, runnable in-process or under torchrun.

The caller (the Prefect flow) writes the training examples as Parquet files and a job file;
`run_job` builds the retriever, trains it and writes the result JSON. Multi-GPU training runs
the very same job with::

    torchrun --nproc_per_node N -m odqa.models.job JOB.json

so every rank reads identical examples and settings, and rank 0 writes the result.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..storage.atomic import atomic_write_json
from .data import MultiSetSampler, read_examples
from .dev_eval import InMemoryDevEvaluator
from .retriever import create_retriever
from .trainer import Trainer, TrainingConfig, TrainResult, seed_everything
from .training_tokens import load_training_tokens


@dataclass
class TrainSet:
    name: str
    path: str
    weight: float = 1.0


@dataclass
class TrainingJob:
    """What every training process runs: the retriever to build (`arch`, `base` resolved to a
    path, `create_retriever`'s `model_options`) and the trainer's `TrainingConfig`."""

    arch: str
    base: str
    training: TrainingConfig
    train_sets: list[TrainSet]
    dev_path: str | None = None
    model_options: dict[str, Any] = field(default_factory=dict)
    resume: bool = False
    result_path: str | None = None
    workspace: str | None = None  # whose passage_tokens table holds (and gets) the passages' token ids

    def write(self, path: Path) -> None:
        atomic_write_json(path, {**asdict(self), "training": self.training.model_dump()})

    @classmethod
    def read(cls, path: Path) -> TrainingJob:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data["train_sets"] = [TrainSet(**s) for s in data["train_sets"]]
        data["training"] = TrainingConfig(**data["training"])
        return cls(**data)


def write_result(result: TrainResult, path: str) -> None:
    """The result file rank 0 writes for the flow (paths as text)."""
    atomic_write_json(path, {**asdict(result), "model_dir": str(result.model_dir),
                             "checkpoint_dir": str(result.checkpoint_dir)})  # fmt: skip


def read_result(path: Path) -> TrainResult:
    data = json.loads(path.read_text(encoding="utf-8"))
    return TrainResult(**{**data, "model_dir": Path(data["model_dir"]), "checkpoint_dir": Path(data["checkpoint_dir"])})


def run_job(job: TrainingJob) -> TrainResult:
    """Build the retriever, train it on the job's examples; rank 0 writes `result_path`."""
    config = job.training
    train_sets = [read_examples(Path(s.path)) for s in job.train_sets]
    sampler = MultiSetSampler(
        train_sets,
        [s.weight for s in job.train_sets],
        seed=config.seed,
        names=[s.name for s in job.train_sets],
    )
    evaluator = InMemoryDevEvaluator(read_examples(Path(job.dev_path))) if job.dev_path else None
    # The layers a retriever adds to its base (TASER's experts, DESIRE-ME's gate and specialisers)
    # start from the run's seed, not from whatever the process drew before: two trainings with the
    # same seed in one process (a worker, a notebook) give the same model.
    seed_everything(config.seed)
    retriever = create_retriever(job.arch, job.base, **job.model_options)
    stored = load_training_tokens(retriever, [e for examples in train_sets for e in examples], job.workspace,
                                  write=int(os.environ.get("RANK", "0")) == 0)  # fmt: skip
    result = Trainer(retriever, sampler, config, evaluator, stored).train(resume=job.resume)
    result.retriever_config = retriever.config.to_dict()
    if stored is not None:
        result.passages_tokenized, result.passage_tokens_reused = stored.tokenized, stored.reused
    if job.result_path and int(os.environ.get("RANK", "0")) == 0:
        write_result(result, job.result_path)
    return result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m odqa.models.job JOB.json  (or under torchrun)", file=sys.stderr)
        return 2
    try:
        run_job(TrainingJob.read(Path(args[0])))
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
