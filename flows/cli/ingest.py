"""`odqa ingest wikipedia`: a MediaWiki XML dump into articles, passages and category_links."""

from __future__ import annotations

import click

from flows.cli.groups import ingest_group, workspace_arg
from flows.cli.report import echo_report


@ingest_group.command("wikipedia")
@click.argument("dump", type=click.Path(exists=True, dir_okay=False))
@click.option("--words", "words_per_passage", default=100, show_default=True, help="Words per passage (DPR: 100).")
@click.option("--keep-lists/--drop-lists", default=True, show_default=True, help="Keep bulleted/numbered list text.")
@click.option("--workers", default=2, show_default=True, help="Cleaner processes.")
@click.pass_context
def ingest_wikipedia(ctx: click.Context, dump: str, words_per_passage: int, keep_lists: bool, workers: int) -> None:
    """Ingest DUMP (.xml or .xml.bz2, multistream too): every page, clean passages, category links."""
    from flows.wikipedia import ingest_wikipedia_flow

    report = ingest_wikipedia_flow(
        dump=dump, workspace=workspace_arg(ctx), words_per_passage=words_per_passage, keep_lists=keep_lists, workers=workers
    )
    echo_report("ingest wikipedia", report)
