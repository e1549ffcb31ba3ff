"""`odqa evaluate`: a run's metrics into the `metrics` table, printed, with an R@K plot."""

from __future__ import annotations

from typing import Any

import click

from .groups import MATCH_HELP, main, parse_cutoffs, workspace_arg, workspace_of


def split_line(split: dict[str, Any]) -> str:
    """What one dataset split was scored on, as a sentence (the report keeps the figures as a dict)."""
    line = f"{split['dataset']}/{split['split']}: {split['questions']:,} questions"
    if "questions_with_answers" in split:
        line += f", {split['questions_with_answers']:,} with answers (answer match)"
    if "questions_judged" in split:
        derived = "".join(f"; {count:,} of them derived from their answers by {origin} (odqa positives)"
                          for origin, count in split.get("qrels_derived", {}).items())  # fmt: skip
        line += f", {split['questions_judged']:,} judged (relevance from {split['qrels_source']}{derived})"
    if split.get("passages_missing"):
        line += f"; {split['passages_missing']:,} retrieved passages missing from the passages table"
    return line


@main.command("evaluate")
@click.option(
    "--run", "run", required=True, help='Run to evaluate (see: odqa sql "SELECT DISTINCT run FROM runs").'
)
@click.option("--k", "ks", default="1,5,20,100", show_default=True, help="Cut-offs for R@K, comma-separated.")
@click.option("--match", type=click.Choice(["auto", "string", "regex"]), default="auto", show_default=True,
              help=MATCH_HELP)  # fmt: skip
@click.option("--groups", is_flag=True, help="Also print the per-relation rows.")
@click.pass_context
def evaluate(ctx: click.Context, run: str, ks: str, match: str, groups: bool) -> None:
    """Evaluate RUN into the metrics table and print its figures (and a plot path)."""
    from ...storage.metrics import run_metrics
    from ..stages.evaluate import evaluate_flow
    from .sql import render

    report = evaluate_flow(run=run, ks=parse_cutoffs(ks), match=match, workspace=workspace_arg(ctx))
    click.echo(f"evaluate {run}: {'no-op (inputs unchanged)' if report.noop else 'done'}")
    click.echo(render(run_metrics(workspace_of(ctx), run, groups=groups), "table"))
    for split in report.splits:
        click.echo(f"  {split_line(split)}")
    if report.plot:
        click.echo(f"plot: {report.plot}")

