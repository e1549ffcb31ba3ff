"""Carve a training split into the questions a model trains on and held-out ones to tune on.

TASER tunes its one hybrid weight on held-out data; tuning it on the set the final figures come
from would report an optimistic number. A recipe therefore holds out a fraction of the TRAINING
questions (never the evaluation set) and trains only on the rest.

Both parts are copies with their own split names and question ids (the ids are derived as an
import derives them, from dataset, split and the original id), so the user's split stays as it
was, and the hard negatives a recipe mines for its copy do not leak into other experiments on
the same questions. Which questions are held out depends only on the question id and the seed:
every model trained with the same fraction and seed sees the same training questions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from .rows import stable_id


@dataclass(frozen=True)
class HeldOut:
    """The two copies of a split: rows for the `questions` table, with their new split names."""

    fit: pa.Table
    tune: pa.Table


def held_out(question_id: str, fraction: float, seed: int) -> bool:
    """Whether a question goes to the tuning part: a hash of (seed, id) under the fraction."""
    digest = hashlib.sha1(f"{seed}\x1f{question_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def _renamed(table: pa.Table, dataset: str, split: str) -> pa.Table:
    ids = [stable_id(dataset, split, qid) for qid in table["question_id"].to_pylist()]
    table = table.set_column(table.schema.get_field_index("question_id"), "question_id", pa.array(ids, pa.string()))
    return table.set_column(table.schema.get_field_index("split"), "split", pa.array([split] * table.num_rows,
                                                                                       pa.string()))


def split_holdout(questions: pa.Table, fit_split: str, tune_split: str, fraction: float, seed: int) -> HeldOut:
    """Copies of one dataset split's question rows: `fit_split` (trained on) and `tune_split`
    (the `fraction` held out; empty for 0). A fraction that leaves no training question, or a
    positive fraction that holds out none, is an error naming the split."""
    if not 0 <= fraction < 1:
        raise ValueError(f"the held-out fraction must be in [0, 1), got {fraction}")
    datasets = set(questions["dataset"].to_pylist())
    if len(datasets) != 1:
        raise ValueError(f"split_holdout takes the questions of one dataset split, got datasets {sorted(datasets)}")
    dataset = datasets.pop()
    mask = pa.array([held_out(q, fraction, seed) for q in questions["question_id"].to_pylist()], pa.bool_())
    fit, tune = questions.filter(pc.invert(mask)), questions.filter(mask)
    if fit.num_rows == 0:
        raise ValueError(f"holding out {fraction:.0%} of {dataset} ({questions.num_rows} questions) leaves none "
                         "to train on")  # fmt: skip
    if fraction > 0 and tune.num_rows == 0:
        raise ValueError(f"holding out {fraction:.0%} of {dataset} ({questions.num_rows} questions) gives no "
                         "question to tune on; raise the fraction")  # fmt: skip
    return HeldOut(_renamed(fit, dataset, fit_split), _renamed(tune, dataset, tune_split))
