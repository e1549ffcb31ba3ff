"""Where the TASER recipe (`odqa train-rounds`) and the paper experiments (`odqa experiment`)
keep things in a workspace: the names of their stages, splits, models and runs, their plots,
and the few reads they need (parameter counts, a run's overall metrics, negatives per split).

Names are part of the layout: a finished round is recognised from its stage record and its
registered model, so the same names must come out on every call with the same inputs.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc

from .ids import derived_name
from .workspace import Workspace

RECIPE = "train-rounds"
EXPERIMENT = "experiment"
PLOT_PREFIX = "experiment-"


# --- the recipe ------------------------------------------------------------------------------


def fit_split(split: str, model_id: str, key: str) -> str:
    """The recipe's copy of a training split that it trains and mines on.

    `key` (a short hash of the recipe's settings) is part of the name, so changing a setting
    gives fresh copies: negatives mined by an earlier configuration never reach a new round 1.
    """
    return f"{split}-fit-{model_id}-{key}"


def tune_split(split: str, model_id: str, key: str) -> str:
    """The recipe's held-out training questions (the hybrid weight is tuned on them)."""
    return f"{split}-tune-{model_id}-{key}"


def splits_stage(model_id: str, dataset: str, split: str) -> str:
    return f"{RECIPE}:{model_id}:splits:{dataset}:{split}"


def splits_source(model_id: str, dataset: str, split: str) -> str:
    """Table source of the recipe's copies in `questions` (replaced as a whole when re-derived)."""
    return splits_stage(model_id, dataset, split)


def round_model(model_id: str, round_number: int) -> str:
    return f"{model_id}-round{round_number}"


def round_stage(model_id: str, round_number: int) -> str:
    """Stage record of a finished round (its report is the round's metrics)."""
    return f"{RECIPE}:{model_id}:round{round_number}"


def final_stage(model_id: str) -> str:
    return f"{RECIPE}:{model_id}:final"


def run_name(prefix: str, dataset: str, split: str) -> str:
    """A run of `prefix` (a model, `bm25`, `<model>-hybrid`) on one question set."""
    return derived_name(f"{prefix}-{dataset}-{split}", "run")


# --- reads -----------------------------------------------------------------------------------


def negatives_summary(ws: Workspace, dataset: str, split: str) -> tuple[int, float, int]:
    """(questions, mean hard negatives per question, questions without any) of a split."""
    rows = ws.read_table("questions", columns=["hard_negative_ids"],
                         filter=(pc.field("dataset") == dataset) & (pc.field("split") == split))  # fmt: skip
    counts = [len(ids or []) for ids in rows["hard_negative_ids"].to_pylist()]
    if not counts:
        return 0, 0.0, 0
    return len(counts), sum(counts) / len(counts), sum(1 for c in counts if c == 0)


# --- experiments -----------------------------------------------------------------------------


def experiment_stage(name: str) -> str:
    return f"{EXPERIMENT}:{name}"


def experiment_model(name: str, label: str) -> str:
    """The model id an experiment trains for one of its retrievers (an arch)."""
    return derived_name(f"{name}-{label}", "model")


def experiment_plot(ws: Workspace, name: str) -> Path:
    return ws.plot_path(f"{PLOT_PREFIX}{name}")
