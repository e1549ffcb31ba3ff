"""`odqa reindex`: ingest new passages, rebuild what serves (BM25, the served models' FAISS) beside it, publish."""

from __future__ import annotations

import click

from ..compositions.incoming import SETTLE_SECONDS
from .groups import INDEX_TYPES, MODEL_HELP, PASSAGE_FORMATS, main, workspace_arg
from .numbers import FiniteRange
from .report import echo_report
from .runner_options import runner_options, runner_settings


@main.command("reindex")
@click.option("--dump", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A new MediaWiki XML dump (.xml/.xml.bz2); only changed pages are cleaned again.")
@click.option("--passages", type=click.Path(exists=True), default=None,
              help="A passages file (or BEIR folder) to import; re-importing a file replaces its rows.")
@click.option("--format", "passages_format", type=click.Choice(PASSAGE_FORMATS), default="dpr-tsv",
              show_default=True, help="Format of --passages.")
@click.option("--model", default=None,
              help="A model to encode with, named as the new default: pinned, and kept by every later re-index "
                   f"(default: the dense models that serve; a first re-index: the newest trained). {MODEL_HELP}")
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True)
@click.option("--bm25/--no-bm25", default=True, show_default=True,
              help="Rebuild the BM25 index when it serves; --no-bm25 while it serves needs --drop-bm25.")
@click.option("--dense/--no-dense", default=True, show_default=True,
              help="Encode and rebuild the FAISS index of each served model; --no-dense while one serves needs "
                   "--drop-model for each.")
@click.option("--drop-bm25", is_flag=True, default=False,
              help="Publish without BM25 (refused while a running `odqa serve` answers with it).")
@click.option("--drop-model", "drop_models", multiple=True, metavar="MODEL",
              help="Publish without this dense model (repeatable; refused while a running `odqa serve` answers "
                   "with it).")
@click.option("--wait-seconds", type=FiniteRange(min=0), default=0.0, show_default=True,
              help="Wait this long for a running re-index (and, with files to take, for a running "
                   "`odqa import passages`) before refusing.")
@click.option("--keep", type=click.IntRange(min=1), default=3, show_default=True, help="Releases kept.")
@click.option("--settle-seconds", type=FiniteRange(min=0), default=SETTLE_SECONDS, show_default=True,
              help="Without --dump/--passages: take a file of incoming/ once unchanged for this long.")
@click.option("--memory-gb", type=FiniteRange(min=0, min_open=True), default=None,
              help="Memory budget of the FAISS build (see `odqa index plan`).")
@runner_options
@click.pass_context
def reindex(ctx: click.Context, dump: str | None, passages: str | None, passages_format: str, model: str | None,
            index_type: str, bm25: bool, dense: bool, drop_bm25: bool, drop_models: tuple[str, ...],
            wait_seconds: float, keep: int, settle_seconds: float, memory_gb: float | None, runner: str | None,
            runner_workers: int | None, dask_address: str | None) -> None:  # fmt: skip
    """Re-index: ingest DUMP or PASSAGES (or what is complete in the workspace's incoming/), rebuild
    the retrievers that serve beside them (BM25, each served model's FAISS index) and publish; a
    running `odqa serve` switches without a failed request and never loses a retriever. What serves
    changes only by name (--model, --drop-bm25, --drop-model), and a run that cannot do its work
    fails before it ingests anything. The same flow as the `reindex` deployment (weekly in prefect.yaml)."""
    from ..compositions.reindex import reindex_flow

    report = reindex_flow(workspace=workspace_arg(ctx), dump=dump, passages=passages, passages_format=passages_format,
                          model=model, index_type=index_type, bm25=bm25, dense=dense, drop_bm25=drop_bm25,
                          drop_models=list(drop_models), wait_seconds=wait_seconds, keep=keep,
                          settle_seconds=settle_seconds, memory_gb=memory_gb,
                          runner=runner_settings(runner, runner_workers, dask_address))  # fmt: skip
    echo_report(f"reindex {report.release}", report)
