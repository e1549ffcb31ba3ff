"""`odqa train`: train a dense retriever (bi-encoder variants, TASER, DESIRE-ME) on workspace data."""

from __future__ import annotations

from typing import Any

import click

from ...models.settings import RetrieverSettings, TrainSettings
from .groups import INDEX_TYPES, NAME_RULE_HELP, checked_name, main, workspace_arg
from .report import echo_report
from .settings_options import settings_from, settings_options


@main.command("train")
@settings_options(RetrieverSettings, optional=["arch"])
@click.option(
    "--train",
    "train_sets",
    required=True,
    multiple=True,
    metavar="NAME:SPLIT[:WEIGHT]",
    help="Training questions (repeatable; WEIGHT scales how often the set is drawn per epoch).",
)
@click.option("--dev", default=None, metavar="NAME:SPLIT", help="Dev questions for R@K model selection.")
@click.option("--model-id", required=True, callback=checked_name,
              help=f"Name of the model folder and `models` row. {NAME_RULE_HELP}")
@settings_options(TrainSettings)
@click.option("--gpus", type=click.IntRange(min=1), default=1, show_default=True,
              help="GPUs per machine (>1 runs torchrun DDP; on a CPU-only machine: that many CPU processes).")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Machines training together; run the same command on each with its --node-rank.")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="This machine's number (0 hosts the rendezvous and registers the model).")
@click.option("--rdzv-endpoint", default=None, help="HOST:PORT of node 0 where the machines meet (--nodes > 1).")
@click.option(
    "--resume/--restart",
    default=None,
    help="Default: continue an interrupted run of this model id from its checkpoint when it was written for the "
    "same parameters and data, else start over (saying why). --resume: must continue; --restart: start over.",
)
@click.option(
    "--qsft",
    is_flag=True,
    help="Query-side fine-tuning (thesis 5.2): train only BASE's question side against its fixed index.",
)
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True,
              help="With --qsft: the index of BASE to retrieve from.")  # fmt: skip
@click.pass_context
def train(ctx: click.Context, train_sets: tuple[str, ...], dev: str | None, model_id: str, gpus: int, nodes: int,
          node_rank: int, rdzv_endpoint: str | None, resume: bool | None, qsft: bool, index_type: str,
          **options: Any) -> None:  # fmt: skip
    """Train a retriever and record it in the `models` table (options: models/settings.py)."""
    if qsft:
        from ..stages.qsft import qsft_flow

        report = qsft_flow(model=options["base"], train=list(train_sets), model_id=model_id, index_type=index_type,
                           epochs=options["epochs"] or 2, batch_size=options["batch_size"], lr=options["lr"],
                           warmup_steps=100 if options["warmup_steps"] is None else options["warmup_steps"],
                           seed=options["seed"], workspace=workspace_arg(ctx))  # fmt: skip
        echo_report(f"train --qsft {model_id}", report)
        return
    if options["arch"] is None:
        raise click.UsageError("--arch is required (unless --qsft)")
    retriever, training = settings_from(RetrieverSettings, options), settings_from(TrainSettings, options)
    from ..stages.train import train_flow

    report = train_flow(model_id=model_id, train=list(train_sets), retriever=retriever, training=training, dev=dev,
                        resume={None: "auto", True: "continue", False: "restart"}[resume],
                        workspace=workspace_arg(ctx), gpus=gpus, nodes=nodes, node_rank=node_rank,
                        rdzv_endpoint=rdzv_endpoint)  # fmt: skip
    echo_report(f"train {model_id}", report)
