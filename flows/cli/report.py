"""Printing stage reports the same way for every verb."""

from __future__ import annotations

from typing import Any

import click


def echo_report(title: str, report: dict[str, Any]) -> None:
    """One `key: value` line per figure, after a title line saying whether work was done."""
    status = "no-op (inputs unchanged)" if report.get("noop") else "done"
    click.echo(f"{title}: {status}")
    for key, value in report.items():
        if key != "noop":
            click.echo(f"  {key}: {value}")
