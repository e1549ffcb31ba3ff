"""Rows of the `metrics` table: how stages write their figures and how the figures are read back.

Every figure is one row (run, dataset, split, metric, value, group, created_at, config): R@K of
a retrieval run, coverage of the domain labels, counts of a re-index, the R@K of each hybrid
alpha tried. `group` is '' for a run's overall figure and names a subset (a relation, an alpha)
otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from .workspace import Workspace

# Metrics read in the order of their cut-off (R@1, R@5, R@20, R@100), not as strings (R@1, R@100,
# R@20, R@5): by name without the `@K`, then K as a number, names without a K first.
METRIC_ORDER_SQL = ("regexp_replace(metric, '@[0-9]+$', ''), "
                    "TRY_CAST(regexp_extract(metric, '@([0-9]+)$', 1) AS INTEGER) NULLS FIRST, metric")  # fmt: skip


def metric_order(name: str) -> tuple[str, int, str]:
    """The sort key of a metric name, as METRIC_ORDER_SQL orders them."""
    base, _, cutoff = name.rpartition("@")
    if base and cutoff.isdigit():
        return base, int(cutoff), name
    return name, -1, name


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def metric_rows(run: str, figures: Iterable[tuple[str, float, str]], *, dataset: str | None = "",
                split: str | None = "", config: Mapping[str, Any] | str | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """`metrics` rows of (metric, value, group) figures, stamped now with one config."""
    created = datetime.now(timezone.utc)
    text = config if isinstance(config, str) or config is None else json.dumps(config, sort_keys=True, default=str)
    return [{"run": run, "dataset": dataset, "split": split, "metric": metric, "value": float(value),
             "group": group, "created_at": created, "config": text} for metric, value, group in figures]  # fmt: skip


def numeric_figures(figures: Mapping[str, Any]) -> list[tuple[str, float, str]]:
    """The numbers of a report (booleans and text left out) as overall (metric, value, '') figures."""
    return [(name, float(value), "") for name, value in figures.items()
            if isinstance(value, int | float) and not isinstance(value, bool)]  # fmt: skip


def has_run(ws: Workspace, run: str) -> bool:
    """Whether `metrics` holds any row of the run `run` (False before the table exists)."""
    if ws.rows("metrics") == 0:
        return False
    return bool(ws.sql(f"SELECT count(*) AS n FROM metrics WHERE run = {_quote(run)}").column("n")[0].as_py())


def run_metrics(ws: Workspace, run: str, *, groups: bool = False) -> pa.Table:
    """A run's figures: dataset, split, group, metric, value (overall rows only unless `groups`)."""
    where = "" if groups else " AND \"group\" = ''"
    return ws.sql('SELECT dataset, split, "group", metric, round(value, 4) AS value FROM metrics '
                  f"WHERE run = {_quote(run)}{where} ORDER BY dataset, split, \"group\", {METRIC_ORDER_SQL}")  # fmt: skip


def overall_metrics(ws: Workspace, run: str) -> pa.Table:
    """The run's overall figures (group ''): dataset, split, metric, value."""
    return ws.sql(f"SELECT dataset, split, metric, value FROM metrics WHERE run = {_quote(run)} "
                  f"AND \"group\" = '' ORDER BY dataset, split, {METRIC_ORDER_SQL}")  # fmt: skip


def recall_table(ws: Workspace, runs: list[str], ks: list[int]) -> pa.Table | None:
    """One row per run and split: run, dataset, split and its overall R@K, in the order of `runs`."""
    if not runs:
        return None
    names = ", ".join(_quote(r) for r in runs)
    columns = ", ".join(f"round(max(value) FILTER (WHERE metric = 'R@{k}'), 3) AS \"R@{k}\"" for k in ks)
    order = " ".join(f"WHEN {_quote(r)} THEN {i}" for i, r in enumerate(runs))
    return ws.sql(f"SELECT run, dataset, split, {columns} FROM metrics WHERE run IN ({names}) AND \"group\" = '' "
                  f"GROUP BY run, dataset, split ORDER BY dataset, split, CASE run {order} END")  # fmt: skip
