"""`odqa export passages`: the passages table as DPR's psgs_w100.tsv."""

from __future__ import annotations

import click

from flows.cli.groups import export_group, workspace_arg
from flows.cli.report import echo_report


@export_group.command("passages")
@click.option("--format", "fmt", type=click.Choice(["dpr-tsv"]), default="dpr-tsv", show_default=True)
@click.argument("out", type=click.Path(dir_okay=False))
@click.pass_context
def export_passages(ctx: click.Context, fmt: str, out: str) -> None:
    """Write the passages table to OUT as DPR's psgs_w100.tsv (header id, text, title)."""
    from flows.passages import export_passages_flow

    echo_report("export passages", export_passages_flow(out=out, fmt=fmt, workspace=workspace_arg(ctx)))
