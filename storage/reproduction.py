"""Where `odqa reproduce` keeps things in a workspace: the `reproduction` table (each paper figure
beside the run's), the stage that writes it, the smoke-sized copies of question sets that
`--limit` makes, and the one read it needs (a run's overall figure)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .schemas import SCHEMAS
from .workspace import Workspace

REPRODUCE = "reproduce"


def reproduce_stage(setup: str) -> str:
    """Stage record (and table source) of a setup's side-by-side table."""
    return f"{REPRODUCE}:{setup}"


def limited_split(split: str, limit: int) -> str:
    """The copy of a split that a `--limit N` run trains or evaluates on: its first N questions."""
    return f"{split}-first{limit}"


def limit_stage(dataset: str, split: str, limit: int) -> str:
    return f"{REPRODUCE}:limit:{dataset}:{limited_split(split, limit)}"


def first_questions(questions: pa.Table, split: str, limit: int) -> pa.Table:
    """The first `limit` questions by id (the same ones on every call), renamed to the limited split."""
    first = questions.sort_by("question_id").slice(0, limit)
    column = pa.array([limited_split(split, limit)] * first.num_rows, pa.string())
    return first.set_column(first.schema.get_field_index("split"), "split", column)


def run_figure(ws: Workspace, run: str, dataset: str, split: str, metric: str) -> float | None:
    """A run's overall figure (group '') on one question set, or None when it has none."""
    if not ws.rows("metrics"):
        return None
    where = ((pc.field("run") == run) & (pc.field("dataset") == dataset) & (pc.field("split") == split)
             & (pc.field("metric") == metric) & (pc.field("group") == ""))  # fmt: skip
    values = ws.read_table("metrics", columns=["value", "created_at"], filter=where).sort_by("created_at")
    return values.column("value")[-1].as_py() if values.num_rows else None


def reproduction_rows(setup: str, rows: Sequence[dict[str, Any]], limited: bool) -> list[dict[str, Any]]:
    """`reproduction` rows of one setup's side-by-side figures, stamped now."""
    created = datetime.now(timezone.utc)
    names = [name for name in SCHEMAS["reproduction"].names if name not in ("setup", "limited", "created_at")]
    return [{"setup": setup, **{name: row[name] for name in names}, "limited": limited, "created_at": created}
            for row in rows]  # fmt: skip


def recorded_figures(ws: Workspace, setup: str, request: str) -> list[dict[str, Any]] | None:
    """The setup's rows of the `reproduction` table when the same request (`request`: the setup
    file, the options) made them and nothing was committed to the workspace since; else None."""
    snapshot = ws.snapshot()
    record = snapshot.stages.get(reproduce_stage(setup))
    if record is None or record.version != snapshot.version or record.report.get("request") != request:
        return None
    return ws.read_table("reproduction", filter=pc.field("setup") == setup).to_pylist()
