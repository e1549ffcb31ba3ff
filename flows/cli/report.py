"""Printing stage reports the same way for every verb: a title line, then a small table."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # reports are dataclasses of storage.reports; imported by the flows, not by --help
    from storage.reports import Report

MAX_VALUE_WIDTH = 100


def format_value(value: Any, width: int = MAX_VALUE_WIDTH) -> str:
    """One cell: lists and dicts as compact JSON, long values cut with an ellipsis."""
    if isinstance(value, (list, tuple, dict)):
        text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    elif isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def report_table(report: dict[str, Any]) -> str:
    """The report's figures as two aligned columns, ``key: value`` with the keys right-aligned
    (no header: the keys say what they are; scripts may still grep ``key: value``)."""
    from tabulate import simple_separated_format, tabulate

    rows = [(key, format_value(value)) for key, value in report.items() if key != "noop"]
    if not rows:
        return ""
    table = tabulate(rows, tablefmt=simple_separated_format(": "), colalign=("right", "left"),
                     disable_numparse=True)  # fmt: skip
    return "\n".join(line.rstrip() for line in table.splitlines())


def echo_report(title: str, report: Report) -> None:
    """A title line saying whether work was done, then the figures indented under it."""
    click.echo(f"{title}: {'no-op (inputs unchanged)' if report.noop else 'done'}")
    table = report_table(report.as_figures())
    if table:
        click.echo("\n".join(f"  {line}" for line in table.splitlines()))
