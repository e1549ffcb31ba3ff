"""`odqa encode`: every passage through a model's passage encoder (resumable shards)."""

from __future__ import annotations

import click

from ...storage.choices import PRECISIONS
from .groups import MODEL_HELP, main, workspace_arg
from .report import echo_report
from .runner_options import runner_options, runner_settings


@main.command("encode")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option("--shard-size", type=click.IntRange(min=1), default=50_000, show_default=True,
              help="Passages per shard (the unit of resuming and of a task on a runner); existing embeddings "
                   "of the model and passages keep the size they were made with.")  # fmt: skip
@click.option("--batch-size", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True,
              help="Stored vector type.")  # fmt: skip
@click.option("--precision", type=click.Choice(list(PRECISIONS)), default="auto", show_default=True,
              help="Compute precision (auto: bf16/fp16 on GPU, fp32 on CPU; bf16: linear weights cast "
                   "to bf16 under autocast; fp32 keeps fp32).")  # fmt: skip
@runner_options
@click.pass_context
def encode(ctx: click.Context, model: str, shard_size: int, batch_size: int, dtype: str, precision: str,
           runner: str | None, runner_workers: int | None, dask_address: str | None) -> None:  # fmt: skip
    """Encode every passage with MODEL's passage encoder (resumable; a no-op when current).

    By default one process encodes (one per GPU when there are several); `--runner` /
    `--dask-address` map one task per shard over a Prefect task runner instead."""
    from ..stages.encode import encode_flow

    report = encode_flow(model=model, workspace=workspace_arg(ctx), shard_size=shard_size, batch_size=batch_size,
                         dtype=dtype, precision=precision,
                         runner=runner_settings(runner, runner_workers, dask_address))  # fmt: skip
    echo_report("encode", report)

