"""`odqa evaluate`: a run's metrics into the `metrics` table, printed, with an R@K plot."""

from __future__ import annotations

import click

from .groups import (
    MATCH_CHOICES,
    MATCH_HELP,
    RUN_PASSAGES,
    RUN_PASSAGES_HELP,
    main,
    parse_cutoffs,
    workspace_arg,
    workspace_of,
)


@main.command("evaluate")
@click.option(
    "--run", "run", required=True, help='Run to evaluate (see: odqa sql "SELECT DISTINCT run FROM runs").'
)
@click.option("--k", "ks", default="1,5,20,100", show_default=True, help="Cut-offs for R@K, comma-separated.")
@click.option("--match", type=click.Choice(MATCH_CHOICES), default="auto", show_default=True,
              help=MATCH_HELP)  # fmt: skip
@click.option("--passages", type=click.Choice(RUN_PASSAGES), default="run", show_default=True, help=RUN_PASSAGES_HELP)
@click.option("--groups", is_flag=True, help="Also print the per-relation rows.")
@click.pass_context
def evaluate(ctx: click.Context, run: str, ks: str, match: str, passages: str, groups: bool) -> None:
    """Evaluate RUN into the metrics table and print its figures (and a plot path)."""
    from ...storage.metrics import run_metrics
    from ..stages.evaluate import evaluate_flow, split_summary
    from .sql import render

    report = evaluate_flow(run=run, ks=parse_cutoffs(ks), match=match, passages=passages, workspace=workspace_arg(ctx))
    click.echo(f"evaluate {run}: {'no-op (inputs unchanged)' if report.noop else 'done'}")
    if report.passages:
        click.echo(f"answers matched in {report.passages}: version {report.passages_version}")
    click.echo(render(run_metrics(workspace_of(ctx), run, groups=groups), "table"))
    for split in report.splits:
        click.echo(f"  {split['dataset']}/{split['split']}: {split_summary(split)}")
    if report.plot:
        click.echo(f"plot: {report.plot}")

