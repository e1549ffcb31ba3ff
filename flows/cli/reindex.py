"""`odqa reindex`: ingest new passages, rebuild BM25 + FAISS beside the served ones, publish."""

from __future__ import annotations

import click

from ..compositions.incoming import SETTLE_SECONDS
from .groups import INDEX_TYPES, MODEL_HELP, main, workspace_arg
from .report import echo_report
from .runner_options import runner_options, runner_settings


@main.command("reindex")
@click.option("--dump", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A new MediaWiki XML dump (.xml/.xml.bz2); only changed pages are cleaned again.")
@click.option("--passages", type=click.Path(exists=True), default=None,
              help="A passages file (or BEIR folder) to import; re-importing a file replaces its rows.")
@click.option("--format", "passages_format", type=click.Choice(["dpr-tsv", "beir"]), default="dpr-tsv",
              show_default=True, help="Format of --passages.")
@click.option("--model", default=None,
              help=f"Production model to encode with (default: the current release's, else the newest). {MODEL_HELP}")
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True)
@click.option("--bm25/--no-bm25", default=True, show_default=True, help="Rebuild the BM25 index.")
@click.option("--dense/--no-dense", default=True, show_default=True, help="Encode and rebuild the FAISS index.")
@click.option("--wait-seconds", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Wait this long for a running re-index before refusing.")
@click.option("--keep", type=click.IntRange(min=1), default=3, show_default=True, help="Releases kept.")
@click.option("--settle-seconds", type=click.FloatRange(min=0), default=SETTLE_SECONDS, show_default=True,
              help="Without --dump/--passages: take a file of incoming/ once unchanged for this long.")
@click.option("--memory-gb", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Memory budget of the FAISS build (see `odqa index plan`).")
@runner_options
@click.pass_context
def reindex(ctx: click.Context, dump: str | None, passages: str | None, passages_format: str, model: str | None,
            index_type: str, bm25: bool, dense: bool, wait_seconds: float, keep: int, settle_seconds: float,
            memory_gb: float | None,
            runner: str | None, runner_workers: int | None, dask_address: str | None) -> None:  # fmt: skip
    """Re-index: ingest DUMP or PASSAGES (or what is complete in the workspace's incoming/), build the
    indexes beside the served ones, publish them; a running `odqa serve` switches without a failed
    request. The same flow as the `reindex` deployment (weekly in prefect.yaml)."""
    from ..compositions.reindex import reindex_flow

    report = reindex_flow(workspace=workspace_arg(ctx), dump=dump, passages=passages, passages_format=passages_format,
                          model=model, index_type=index_type, bm25=bm25, dense=dense, wait_seconds=wait_seconds,
                          keep=keep, settle_seconds=settle_seconds, memory_gb=memory_gb, runner=runner_settings(runner, runner_workers, dask_address))  # fmt: skip
    echo_report(f"reindex {report.release}", report)
