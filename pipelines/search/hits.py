"""The one result type of every searcher: the top passages of a batch of questions, best first.

Hits are a run table (question_id, passage_id, rank, score) whose question ids are the questions'
positions in the batch ("0", "1", ...): Arrow columns end to end, so a run of many questions never
builds a Python object per hit, while the service can still ask for per-question lists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HIT_SCHEMA = pa.schema([("question_id", pa.string()), ("passage_id", pa.string()), ("rank", pa.int32()),
                        ("score", pa.float32())])  # fmt: skip

Ranked = list[tuple[str, float]]  # (passage_id, score), best first


def positions(count: int) -> pa.Array:
    """The question ids of a batch of `count` questions: their positions as text."""
    return pa.array([str(i) for i in range(count)], pa.string())


@dataclass(frozen=True)
class Hits:
    """Top passages of `count` questions as a run table keyed by question position."""

    table: pa.Table
    count: int

    @classmethod
    def from_run(cls, table: pa.Table | pa.RecordBatch, count: int) -> Hits:
        """Hits of a run table whose question ids are batch positions (other columns dropped)."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        columns = [table.column(f.name).cast(f.type) for f in HIT_SCHEMA]
        return cls(pa.Table.from_arrays(columns, schema=HIT_SCHEMA), count)

    @classmethod
    def from_ranked(cls, ranked: list[Ranked]) -> Hits:
        """Hits of per-question (passage_id, score) lists."""
        rows = [(str(q), pid, rank, score) for q, found in enumerate(ranked)
                for rank, (pid, score) in enumerate(found, start=1)]  # fmt: skip
        columns = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
        return cls(pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, HIT_SCHEMA, strict=True)],
                                        schema=HIT_SCHEMA), len(ranked))  # fmt: skip

    def ranked(self) -> list[Ranked]:
        """Per question, in batch order: its (passage_id, score) pairs, best first."""
        table = self.table.sort_by([("rank", "ascending")])
        out: list[Ranked] = [[] for _ in range(self.count)]
        questions = np.asarray(table.column("question_id").to_pylist(), dtype=np.int64) if table.num_rows else []
        for q, pid, score in zip(questions, table.column("passage_id").to_pylist(),
                                 table.column("score").to_pylist(), strict=True):  # fmt: skip
            out[q].append((pid, float(score)))
        return out

    def top(self, k: int) -> Hits:
        """The same hits cut at rank `k`."""
        return Hits(self.table.filter(pc.less_equal(self.table.column("rank"), k)), self.count)

    def run(self, question_ids: pa.Array | pa.ChunkedArray) -> pa.Table:
        """The hits as rows of the `runs` table: question_id, passage_id, rank, score."""
        if len(question_ids) != self.count:
            raise ValueError(f"got {len(question_ids)} question ids for {self.count} questions")
        ids = question_ids.combine_chunks() if isinstance(question_ids, pa.ChunkedArray) else question_ids
        rows = pc.cast(self.table.column("question_id"), pa.int64())
        return self.table.set_column(0, "question_id", ids.cast(pa.string()).take(rows))
