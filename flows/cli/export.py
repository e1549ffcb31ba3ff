"""`odqa export ...`: passages as DPR's psgs_w100.tsv, models for sentence-transformers, BEIR data.

Every export writes where the user says, under one rule (`storage.write_targets`): an existing
file or non-empty folder is replaced only with `--force` (a folder only when it is an earlier
odqa export of the same kind), and the workspace, a folder above it or one of its own folders
never, not even with `--force`.
"""

from __future__ import annotations

import click

from .groups import export_group, workspace_arg
from .report import echo_report

FORCE_FILE_HELP = "Replace an existing OUT file (never one in the workspace's own folders)."
FORCE_FOLDER_HELP = ("Replace OUT when it holds an earlier odqa export of this kind (a folder odqa did not write "
                     "is never replaced; nor the workspace, a folder above it, or one of its own folders).")  # fmt: skip


@export_group.command("passages")
@click.option("--format", "fmt", type=click.Choice(["dpr-tsv"]), default="dpr-tsv", show_default=True)
@click.option("--force", is_flag=True, help=FORCE_FILE_HELP)
@click.argument("out", type=click.Path(dir_okay=False))
@click.pass_context
def export_passages(ctx: click.Context, fmt: str, force: bool, out: str) -> None:
    """Write the passages table to OUT as DPR's psgs_w100.tsv (header id, text, title); an existing
    OUT is refused unless --force."""
    from ..stages.passages import export_passages_flow

    echo_report("export passages", export_passages_flow(out=out, fmt=fmt, force=force, workspace=workspace_arg(ctx)))


@export_group.command("model")
@click.argument("model")
@click.option("--format", "fmt", type=click.Choice(["sentence-transformers"]), default="sentence-transformers",
              show_default=True)  # fmt: skip
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Folder to write: new or empty (or an earlier export, with --force).")  # fmt: skip
@click.option("--force", is_flag=True, help=FORCE_FOLDER_HELP)
@click.pass_context
def export_model(ctx: click.Context, model: str, fmt: str, out: str, force: bool) -> None:
    """Write MODEL (a model id, folder or hub name) as a folder that SentenceTransformer(OUT) loads
    without odqa; encode passages as (title, text) pairs (see the folder's README.md)."""
    from ..stages.export import export_model_flow

    echo_report("export model", export_model_flow(model=model, out=out, fmt=fmt, force=force,
                                                  workspace=workspace_arg(ctx)))  # fmt: skip


@export_group.command("beir")
@click.argument("dataset")
@click.argument("split")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Folder to write: new or empty (or an earlier export, with --force).")  # fmt: skip
@click.option("--force", is_flag=True, help=FORCE_FOLDER_HELP)
@click.option("--allow-empty-qrels", is_flag=True,
              help="Export a split none of whose questions is judged (an empty qrels file, with a warning) "
                   "instead of refusing it.")  # fmt: skip
@click.pass_context
def export_beir(ctx: click.Context, dataset: str, split: str, out: str, force: bool, allow_empty_qrels: bool) -> None:
    """Write the passages and DATASET/SPLIT's questions and judgments (the qrels `odqa evaluate` scores
    against) in BEIR's layout: OUT/corpus.jsonl, OUT/queries.jsonl, OUT/qrels/SPLIT.tsv. A split
    without judgments is refused unless --allow-empty-qrels."""
    from ..stages.export import export_beir_flow

    report = export_beir_flow(dataset=dataset, split=split, out=out, force=force, allow_empty_qrels=allow_empty_qrels,
                              workspace=workspace_arg(ctx))  # fmt: skip
    echo_report("export beir", report)
    if report.warning:
        click.echo(f"odqa: warning: {report.warning}", err=True)
