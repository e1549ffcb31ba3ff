"""Run rows: one retrieved passage per row, the shape every retriever produces.

``rank`` starts at 1 for the best passage of a question and is authoritative: metrics, hard
negatives and TREC export all follow it rather than re-sorting by ``score``.
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.compute as pc

RUN_SCHEMA = pa.schema(
    [
        pa.field("question_id", pa.string(), nullable=False),
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
    ]
)


def ranked_lists(run: pa.Table, max_rank: int | None = None) -> dict[str, list]:
    """question_id -> passage ids in rank order (rank 1 first), cut at ``max_rank``."""
    for column in ("question_id", "passage_id", "rank"):
        if column not in run.column_names:
            raise ValueError(f"run table lacks column {column!r} (has {run.column_names})")
    if run.num_rows and pc.min(run["rank"]).as_py() < 1:
        raise ValueError("run ranks must start at 1")
    if max_rank is not None:
        run = run.filter(pc.less_equal(run["rank"], max_rank))
    run = run.sort_by([("question_id", "ascending"), ("rank", "ascending")])
    qids = run["question_id"].cast(pa.string()).to_pylist()
    pids = run["passage_id"].to_pylist()
    return {
        qid: [pid for _, pid in rows]
        for qid, rows in itertools.groupby(zip(qids, pids, strict=True), key=lambda row: row[0])
    }
