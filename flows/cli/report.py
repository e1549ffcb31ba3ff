"""Printing stage reports the same way for every verb: a title line, then a small table."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # reports are dataclasses of storage.reports; imported by the flows, not by --help
    from ...storage.reports import Report

def format_value(value: Any) -> str:
    """One cell: lists and dicts as compact JSON (never cut: a config must stay readable whole),
    a dict of metrics in the order of their cut-offs (R@1, R@5, R@20, R@100)."""
    from ...storage.metrics import metric_order

    if isinstance(value, dict):
        value = {key: value[key] for key in sorted(value, key=lambda k: metric_order(str(k)))}
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def report_table(report: dict[str, Any]) -> str:
    """The report's figures as two aligned columns, ``key: value`` with the keys right-aligned
    (no header: the keys say what they are; scripts may still grep ``key: value``). Fields that
    do not apply to this run (None) are left out rather than printed as ``None``."""
    from tabulate import simple_separated_format, tabulate

    rows = [(key, format_value(value)) for key, value in report.items() if key != "noop" and value is not None]
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
