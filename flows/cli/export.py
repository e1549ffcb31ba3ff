"""`odqa export ...`: passages as DPR's psgs_w100.tsv, models for sentence-transformers, BEIR data."""

from __future__ import annotations

import click

from .groups import export_group, workspace_arg
from .report import echo_report


@export_group.command("passages")
@click.option("--format", "fmt", type=click.Choice(["dpr-tsv"]), default="dpr-tsv", show_default=True)
@click.argument("out", type=click.Path(dir_okay=False))
@click.pass_context
def export_passages(ctx: click.Context, fmt: str, out: str) -> None:
    """Write the passages table to OUT as DPR's psgs_w100.tsv (header id, text, title)."""
    from ..stages.passages import export_passages_flow

    echo_report("export passages", export_passages_flow(out=out, fmt=fmt, workspace=workspace_arg(ctx)))


@export_group.command("model")
@click.argument("model")
@click.option("--format", "fmt", type=click.Choice(["sentence-transformers"]), default="sentence-transformers",
              show_default=True)  # fmt: skip
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Folder to write (replaced).")
@click.pass_context
def export_model(ctx: click.Context, model: str, fmt: str, out: str) -> None:
    """Write MODEL (a model id, folder or hub name) as a folder that SentenceTransformer(OUT) loads
    without odqa; encode passages as (title, text) pairs (see the folder's README.md)."""
    from ..stages.export import export_model_flow

    echo_report("export model", export_model_flow(model=model, out=out, fmt=fmt, workspace=workspace_arg(ctx)))


@export_group.command("beir")
@click.argument("dataset")
@click.argument("split")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Folder to write into.")
@click.pass_context
def export_beir(ctx: click.Context, dataset: str, split: str, out: str) -> None:
    """Write the passages and DATASET/SPLIT's questions and judgments (positive passages) in BEIR's
    layout: OUT/corpus.jsonl, OUT/queries.jsonl, OUT/qrels/SPLIT.tsv."""
    from ..stages.export import export_beir_flow

    echo_report("export beir", export_beir_flow(dataset=dataset, split=split, out=out, workspace=workspace_arg(ctx)))
