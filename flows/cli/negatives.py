"""`odqa negatives bm25`: DPR's BM25 hard negatives for training."""

from __future__ import annotations

import click

from .groups import negatives_group, passages_per_question, workspace_arg
from .report import echo_report


@negatives_group.command("bm25")
@click.option("--dataset", required=True)
@click.option("--split", required=True)
@click.option("--count", type=click.IntRange(1, 30), default=1, show_default=True,
              help="Negatives per question (DPR: 1).")  # fmt: skip
@click.option(
    "--depth", type=int, default=100, show_default=True, callback=passages_per_question,
    help="BM25 passages considered per question.",
)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Search threads (default: all cores).")
@click.pass_context
def negatives_bm25(
    ctx: click.Context, dataset: str, split: str, count: int, depth: int, threads: int | None
) -> None:
    """Top BM25 passages that contain no answer and are not positives (DPR's recipe)."""
    from ..stages.negatives import bm25_negatives_flow

    report = bm25_negatives_flow(dataset=dataset, split=split, count=count, depth=depth, threads=threads,
                                 workspace=workspace_arg(ctx))  # fmt: skip
    echo_report("negatives bm25", report)
