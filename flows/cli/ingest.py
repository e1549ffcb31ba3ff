"""`odqa ingest wikipedia` (a MediaWiki XML dump) and `odqa ingest categories` (category-graph SQL dumps)."""

from __future__ import annotations

import click

from .groups import ingest_group, workspace_arg
from .report import echo_report
from .runner_options import runner_options, runner_settings


@ingest_group.command("wikipedia")
@click.argument("dump", type=click.Path(exists=True, dir_okay=False))
@click.option("--words", "words_per_passage", type=click.IntRange(min=1), default=100, show_default=True, help="Words per passage (DPR: 100).")
@click.option("--keep-lists/--drop-lists", default=True, show_default=True, help="Keep bulleted/numbered list text.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True, help="Processes of the local cleaning pool (no --runner).")
@click.option("--chunk-pages", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Pages per cleaning task.")
@runner_options
@click.pass_context
def ingest_wikipedia(ctx: click.Context, dump: str, words_per_passage: int, keep_lists: bool, workers: int,
                     chunk_pages: int, runner: str | None, runner_workers: int | None, dask_address: str | None) -> None:
    """Ingest DUMP (.xml or .xml.bz2, multistream too): every page, clean passages, category links.

    By default pages are cleaned by a local process pool; `--runner` / `--dask-address` map the
    page chunks over a Prefect task runner instead (a Dask cluster for several machines)."""
    from ..stages.wikipedia import ingest_wikipedia_flow

    report = ingest_wikipedia_flow(
        dump=dump, workspace=workspace_arg(ctx), words_per_passage=words_per_passage, keep_lists=keep_lists,
        workers=workers, chunk_pages=chunk_pages, runner=runner_settings(runner, runner_workers, dask_address),
    )  # fmt: skip
    echo_report("ingest wikipedia", report)


@ingest_group.command("categories")
@click.option(
    "--page", "page", type=click.Path(exists=True, dir_okay=False), required=True, help="page.sql(.gz)"
)
@click.option(
    "--categorylinks",
    type=click.Path(exists=True, dir_okay=False),
    required=True,
    help="categorylinks.sql(.gz), with cl_to (legacy) or cl_target_id (MediaWiki 1.44+).",
)
@click.option(
    "--linktarget",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="linktarget.sql(.gz); needed when categorylinks uses cl_target_id.",
)
@click.option(
    "--redirect",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="redirect.sql(.gz): redirect targets, so article and category redirects are followed.",
)
@click.option("--skip-bad", is_flag=True, help="Skip corrupt statements/rows (counted) instead of stopping.")
@click.pass_context
def ingest_categories(
    ctx: click.Context,
    page: str,
    categorylinks: str,
    linktarget: str | None,
    redirect: str | None,
    skip_bad: bool,
) -> None:
    """Ingest MediaWiki SQL dumps into category_links (and articles when no XML dump was ingested)."""
    from ..stages.categories import ingest_categories_flow

    report = ingest_categories_flow(
        page=page,
        categorylinks=categorylinks,
        linktarget=linktarget,
        redirect=redirect,
        skip_bad=skip_bad,
        workspace=workspace_arg(ctx),
    )
    echo_report("ingest categories", report)

