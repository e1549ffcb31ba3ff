"""`odqa tune-hybrid`: TASER's hybrid weight alpha, chosen on dev questions."""

from __future__ import annotations

import click

from .groups import INDEX_TYPES, MODEL_HELP, main, workspace_arg
from .report import echo_report


@main.command("tune-hybrid")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option("--dev", multiple=True, required=True, metavar="NAME:SPLIT",
              help="Dev questions (repeatable; TASER tunes one alpha on the combined dev sets).")  # fmt: skip
@click.option("--k", type=click.IntRange(min=1), default=20, show_default=True, help="Select alpha by R@k.")
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True)
@click.pass_context
def tune_hybrid(ctx: click.Context, model: str, dev: tuple[str, ...], k: int, index_type: str) -> None:
    """Pick the hybrid weight alpha in 0.5..2.0 (step 0.1) with the best dev R@k and store it."""
    from ..stages.tune_hybrid import tune_hybrid_flow

    report = tune_hybrid_flow(model=model, dev=list(dev), k=k, index_type=index_type, workspace=workspace_arg(ctx))
    echo_report("tune-hybrid", report)

