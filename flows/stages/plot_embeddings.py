"""`odqa plot embeddings`: t-SNE of question vs passage embeddings (dual-encoder paper, fig. 2).

Questions are sampled from DATASET/SPLIT (default: all questions); passages are their positives,
topped up with random passages. Do the two towers of a model map into one space?
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import pyarrow as pa
from prefect import flow
from pydantic import Field

from ...models.searchers import loaded_model
from ...pipelines.dense.tsne_plot import plot_towers, project_towers
from ...storage import Workspace
from ...storage.model_registry import resolve_model
from ...storage.passages import passages_with_ids, random_passages
from ...storage.questions import questions_of_splits
from ...storage.reports import Report
from ..plumbing.bounds import Seed


@dataclass
class PlotEmbeddingsReport(Report):
    model: str
    plot: str
    questions: int
    passages: int
    tower_separation: float


@flow(name="plot-embeddings")
def plot_embeddings_flow(
    model: str,
    dataset: str | None = None,
    split: str | None = None,
    samples: Annotated[int, Field(ge=5)] = 500,
    seed: Seed = 0,
    workspace: str | None = None,
) -> PlotEmbeddingsReport:
    """t-SNE of question vs passage embeddings as a PNG in plots/ (see the module doc)."""
    ws = Workspace.resolve(workspace)
    ref = resolve_model(ws, model)
    questions = questions_of_splits(ws, [(dataset, split or "")] if dataset else None, ["question", "positive_ids"])
    if questions.num_rows == 0:
        raise ValueError("no questions to plot: import questions first (or check --dataset/--split)")
    rng = np.random.default_rng(seed)
    picked = questions.take(pa.array(np.sort(rng.choice(questions.num_rows, min(samples, questions.num_rows),
                                                        replace=False))))  # fmt: skip
    positives = sorted({p for ids in picked.column("positive_ids").to_pylist() for p in (ids or [])})[:samples]
    passages = passages_with_ids(ws, positives)
    if passages.num_rows < samples:
        passages = pa.concat_tables([passages, random_passages(ws, samples - passages.num_rows, rng, set(positives))])
    question_model = loaded_model(ref.path).model
    passage_model = question_model if ref.shares_passage_side else loaded_model(ref.passage_path).model
    q = question_model.encode_questions(picked.column("question").to_pylist())
    p = passage_model.encode_passages([t or "" for t in passages.column("title").to_pylist()],
                                      passages.column("text").to_pylist())  # fmt: skip
    projection = project_towers(q, p, seed=seed)
    path = plot_towers(projection, ws.plot_path(f"tsne-{ref.key}"),
                       f"t-SNE of {ref.name}: {len(q)} questions, {len(p)} passages")  # fmt: skip
    return PlotEmbeddingsReport(model=model, plot=str(path), questions=len(q), passages=len(p),
                                tower_separation=round(projection.tower_separation, 3))  # fmt: skip
