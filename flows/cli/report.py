"""Printing stage reports the same way for every verb (and as the flows log them:
`flows.plumbing.report_text`): a title line, then a small table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..plumbing.report_text import report_text

if TYPE_CHECKING:  # reports are dataclasses of storage.reports; imported by the flows, not by --help
    from ...storage.reports import Report


def echo_report(title: str, report: Report) -> None:
    """A title line saying whether work was done, then the figures indented under it."""
    click.echo(report_text(title, report))
