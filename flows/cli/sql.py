"""`odqa sql`: read-only SQL over the workspace catalog."""

from __future__ import annotations

import csv
import io
import json
from typing import TYPE_CHECKING

import click

from .groups import main, workspace_of
from .numbers import FiniteRange

if TYPE_CHECKING:  # pyarrow is imported by the query itself, not by `odqa --help`
    import pyarrow as pa


def _number(value: object, single_precision: bool) -> str:
    """A number as DuckDB's own CLI prints it: the shortest text that reads back to the same value
    in the column's type (a FLOAT column's as float32, a DOUBLE's as float64), a DECIMAL with its
    scale."""
    if single_precision and isinstance(value, float):
        import numpy as np

        return str(np.float32(value))
    return str(value)  # int, float64 (Python's repr is the shortest round trip), Decimal, nan, inf


def _cell(value: object, width: int) -> object:
    if isinstance(value, (list, dict)):
        value = json.dumps(value, ensure_ascii=False, default=str)
    if isinstance(value, str) and len(value) > width:
        return value[: width - 1] + "…"
    return value


def render(table: pa.Table, fmt: str, max_width: int = 60) -> str:
    """The query result as an aligned table, CSV or JSON Lines.

    The table prints each value as it is: a string is never read as a number (`'0.123456789'`
    stays that text), and a number keeps every digit its type holds (see `_number`); numeric
    columns are right-aligned."""
    import pyarrow as pa
    from tabulate import tabulate

    rows = table.to_pylist()
    if fmt == "json":
        return "\n".join(json.dumps(r, ensure_ascii=False, default=str) for r in rows)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(table.column_names)
        for r in rows:
            writer.writerow([json.dumps(v, ensure_ascii=False) if isinstance(v, list) else v for v in r.values()])
        return out.getvalue().rstrip("\n")
    types = table.schema.types
    numeric = [pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) for t in types]
    single = [pa.types.is_float32(t) for t in types]
    body = [[_number(v, one) if is_number and v is not None else _cell(v, max_width)
             for v, one, is_number in zip(r.values(), single, numeric, strict=True)] for r in rows]  # fmt: skip
    return tabulate(body, headers=table.column_names, tablefmt="simple", disable_numparse=True,
                    colalign=["right" if is_number else "left" for is_number in numeric] or None)  # fmt: skip


@main.command("sql")
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--max-width", default=60, show_default=True, help="Truncate wide text cells in table output.")
@click.option("--timeout", "timeout_s", type=FiniteRange(min=0, min_open=True), default=60.0, show_default=True,
              metavar="SECONDS", help="Stop the query after this many seconds.")  # fmt: skip
@click.option("--memory-limit", default=None, metavar="SIZE",
              help="DuckDB's memory for the query, e.g. 8GB or 50% (default: a quarter of the machine's memory, "
                   "at most 4 GiB); beyond it DuckDB spills to <workspace>/tmp/duckdb.")  # fmt: skip
@click.option("--threads", type=click.IntRange(min=1), default=None, help="DuckDB's threads (default: half the cores).")
@click.pass_context
def sql_command(ctx: click.Context, query: str, fmt: str, max_width: int, timeout_s: float, memory_limit: str | None,
                threads: int | None) -> None:  # fmt: skip
    """Run one read-only SQL QUERY over every workspace table (DuckDB views), within a time and
    memory limit."""
    from ...storage.catalog import QueryLimitError, QueryLimits, ReadOnlyViolation

    try:
        limits = QueryLimits(timeout_s=timeout_s, memory_limit=memory_limit, threads=threads)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--memory-limit") from exc
    try:
        result = workspace_of(ctx).sql(query, limits)
    except ReadOnlyViolation as exc:
        raise click.UsageError(str(exc)) from exc
    except QueryLimitError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(render(result, fmt, max_width))
