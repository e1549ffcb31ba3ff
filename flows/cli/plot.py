"""`odqa plot embeddings`: t-SNE of question vs passage embeddings."""

from __future__ import annotations

import click

from .groups import MODEL_HELP, SEED, plot_group, workspace_arg
from .report import echo_report


@plot_group.command("embeddings")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option("--dataset", default=None, help="Questions of this dataset (default: all).")
@click.option("--split", default=None)
@click.option("--samples", type=click.IntRange(min=5), default=500, show_default=True,
              help="Questions and passages each.")  # fmt: skip
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.pass_context
def plot_embeddings(ctx: click.Context, model: str, dataset: str | None, split: str | None, samples: int,
                    seed: int) -> None:  # fmt: skip
    """t-SNE of question vs passage embeddings: do the two towers share one space?"""
    from ..stages.plot_embeddings import plot_embeddings_flow

    report = plot_embeddings_flow(model=model, dataset=dataset, split=split, samples=samples, seed=seed,
                                  workspace=workspace_arg(ctx))  # fmt: skip
    echo_report("plot embeddings", report)
