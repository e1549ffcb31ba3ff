"""`odqa ingest categories` (SQL dumps -> category graph) and `odqa label domains` (DESIRE-ME labels)."""

from __future__ import annotations

import click

from flows.cli.groups import ingest_group, main, workspace_arg
from flows.cli.report import echo_report


@main.group("label")
def label_group() -> None:
    """Derive labels from the ingested sources (domains from the Wikipedia category graph)."""


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
    from flows.categories import ingest_categories_flow

    report = ingest_categories_flow(
        page=page,
        categorylinks=categorylinks,
        linktarget=linktarget,
        redirect=redirect,
        skip_bad=skip_bad,
        workspace=workspace_arg(ctx),
    )
    echo_report("ingest categories", report)


@label_group.command("domains")
@click.option(
    "--domains",
    "domains_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Domain file (top-level categories, hidden prefixes; format in pipelines/categories/domain_config.py). "
    "Default: DESIRE-ME's 39 top-level categories.",
)
@click.option(
    "--max-depth",
    type=click.IntRange(min=1),
    default=None,
    help="Deepest category level walked (default 10).",
)
@click.pass_context
def label_domains(ctx: click.Context, domains_file: str | None, max_depth: int | None) -> None:
    """Label articles and questions with domains from the category graph; print the coverage report."""
    from flows.categories import label_domains_flow

    report = label_domains_flow(workspace=workspace_arg(ctx), domains_file=domains_file, max_depth=max_depth)
    coverage = report.pop("coverage", None)
    echo_report("label domains", report)
    if coverage:
        click.echo(coverage)
