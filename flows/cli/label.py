"""`odqa label domains`: DESIRE-ME domain labels from the Wikipedia category graph."""

from __future__ import annotations

import click

from .groups import label_group, workspace_arg
from .report import echo_report


@label_group.command("domains")
@click.option(
    "--domains",
    "domains_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Domain file (top-level categories, hidden prefixes; format in pipelines/categories/domain_config.py). "
    "Default: DESIRE-ME's 39 top-level categories.",
)
@click.option(
    "--max-depth",
    type=click.IntRange(min=1),
    default=None,
    help="Deepest category level walked (default 10).",
)
@click.pass_context
def label_domains(ctx: click.Context, domains_file: str | None, max_depth: int | None) -> None:
    """Label articles and questions with domains from the category graph; print the coverage report."""
    from ..stages.categories import label_domains_flow

    report = label_domains_flow(workspace=workspace_arg(ctx), domains_file=domains_file, max_depth=max_depth)
    echo_report("label domains", report)
    click.echo(report.coverage)
