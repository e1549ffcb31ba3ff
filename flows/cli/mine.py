"""`odqa mine`: hard negatives from a trained model's top passages."""

from __future__ import annotations

import click

from .groups import INDEX_TYPES, MODEL_HELP, TRAINING_MODES, main, passages_per_question, workspace_arg
from .report import echo_report
from .runner_options import runner_options, runner_settings


@main.command("mine")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option("--dataset", required=True)
@click.option("--split", required=True)
@click.option("--mode", type=click.Choice(TRAINING_MODES), default="single-set", show_default=True,
              help="single-set: new negatives = BM25 P1 u mined P2; multi-set: P2 only (TASER).")  # fmt: skip
@click.option("--depth", type=int, default=100, show_default=True, callback=passages_per_question,
              help="Passages retrieved.")
@click.option("--count", type=click.IntRange(min=1), default=30, show_default=True, help="Mined negatives kept.")
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True)
@click.option("--question-batch", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Questions per mining task on a task runner.")  # fmt: skip
@runner_options
@click.pass_context
def mine(ctx: click.Context, model: str, dataset: str, split: str, mode: str, depth: int, count: int,
         index_type: str, question_batch: int, runner: str | None, runner_workers: int | None,
         dask_address: str | None) -> None:  # fmt: skip
    """Hard negatives from MODEL's top passages (no gold, no answer-bearing) into hard_negative_ids."""
    from ..stages.mine import mine_flow

    report = mine_flow(model=model, dataset=dataset, split=split, mode=mode, depth=depth, count=count,
                       index_type=index_type, workspace=workspace_arg(ctx), question_batch=question_batch,
                       runner=runner_settings(runner, runner_workers, dask_address))  # fmt: skip
    echo_report("mine", report)

