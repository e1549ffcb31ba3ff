"""DESIRE-ME's gate targets: which domain labels the gate's BCE learns from (fidelity row 12).

- `question` (the default, as the paper: "the categories of the query"): the question's
  `domains`, the union over the articles of all its positive passages (`odqa label domains`).
- `positive` (pkasela/DESIRE-ME `dataloader.py:26-34`): the categories of the one positive
  passage the example trains on, so a question whose positives lie in articles of different
  domains is taught only the domains of that passage's article. The reference draws that
  positive at random from the qrels each time it reads the question; an odqa example keeps
  DPR's positive (the first gold passage present), and its target is that passage's domains.

The choice is made when the training examples are loaded, so the model and the trainer see
ordinary examples either way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import get_args

import pyarrow as pa
import pyarrow.compute as pc

from ..pipelines.categories.coverage import positive_passage_domains
from ..pipelines.categories.titles import normalize_titles
from ..storage.workspace import Workspace
from .config import DESIRE_ME_ARCHS
from .data import TrainingExample
from .settings import GateTargets, TrainSettings

GATE_TARGETS: tuple[str, ...] = get_args(GateTargets)
DEFAULT_GATE_TARGETS = TrainSettings.model_fields["gate_targets"].default


def check_gate_targets(arch: str, gate_targets: str) -> None:
    """Refuse an unknown choice, and `positive` for a model without a domain gate."""
    if gate_targets not in GATE_TARGETS:
        raise ValueError(f"gate_targets must be one of {', '.join(GATE_TARGETS)}, got {gate_targets!r}")
    if gate_targets != DEFAULT_GATE_TARGETS and arch not in DESIRE_ME_ARCHS:
        raise ValueError(
            f"gate_targets={gate_targets!r} applies to {', '.join(DESIRE_ME_ARCHS)} only, not {arch!r}"
        )


def _labels_of_titles(ws: Workspace, titles: pa.Array) -> pa.Table:
    """The `domains` rows (title, domain) of the given normalized titles, read in batches
    (the table holds every labelled article of the wiki)."""
    wanted = pc.unique(titles)
    kept = [
        batch.filter(pc.is_in(normalize_titles(batch.column("title")), value_set=wanted))
        for batch in ws.scan("domains", ["title", "domain"])
    ]
    schema = pa.schema([("title", pa.string()), ("domain", pa.string())])
    return pa.Table.from_batches(kept, schema=schema) if kept else schema.empty_table()


def with_gate_targets(
    ws: Workspace, examples: Sequence[TrainingExample], passages: pa.Table, gate_targets: str
) -> list[TrainingExample]:
    """The examples with their `domains` as the gate should learn them (see the module doc).

    `passages` (passage_id, title) must hold every example's positive passage."""
    if gate_targets not in GATE_TARGETS:
        raise ValueError(f"gate_targets must be one of {', '.join(GATE_TARGETS)}, got {gate_targets!r}")
    if gate_targets == "question":
        return list(examples)
    if not ws.rows("domains"):
        raise ValueError(
            "gate_targets='positive' reads the passages' domains: run `odqa label domains` first"
        )
    positives = pa.array([e.positive_id for e in examples], pa.string())
    rows = passages.filter(pc.is_in(passages.column("passage_id").cast(pa.string()), value_set=positives))
    labels = _labels_of_titles(ws, normalize_titles(rows.column("title")))
    # Domains in the order the question's own labels use (the labeller's order), then by name.
    order = list(dict.fromkeys(d for e in examples for d in e.domains))
    by_passage = positive_passage_domains(positives, rows.select(["passage_id", "title"]), labels, order)
    return [dataclasses.replace(e, domains=tuple(by_passage.get(str(e.positive_id), ()))) for e in examples]
