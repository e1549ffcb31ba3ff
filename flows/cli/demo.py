"""`odqa demo`: the pipeline on the bundled sample."""

from __future__ import annotations

import click

from .groups import main, workspace_arg


@main.command("demo")
@click.pass_context
def demo(ctx: click.Context) -> None:
    """Run the pipeline on the bundled sample into the workspace and show the results."""
    from ..compositions.demo import demo_flow

    # Every stage prints its own line with its time; progress of a long one every 2 minutes.
    ctx.find_root().obj["terminal"].terminal.stage_lines(gap=120.0)
    demo_flow(workspace=workspace_arg(ctx))
