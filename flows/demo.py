"""`odqa demo`: the pipeline on the bundled sample, ending with tables a user would look at.

Each step is the same flow the CLI verb runs, so the demo doubles as a smoke test of the
whole system on two CPU cores.
"""

from __future__ import annotations

from typing import Any

import click
from prefect import flow

from flows.cli.sql import render
from flows.sample_data import SAMPLE_DUMP
from flows.wikipedia import ingest_wikipedia_flow
from storage import Workspace

SHOWCASE_QUERIES = [
    (
        "Passages per article (longest first)",
        "SELECT title, count(*) AS passages, sum(len(string_split(text, ' '))) AS words "
        "FROM passages GROUP BY title ORDER BY passages DESC, title LIMIT 5",
    ),
    (
        "Pages by namespace, with redirects",
        "SELECT namespace, count(*) AS pages, count(*) FILTER (WHERE is_redirect) AS redirects "
        "FROM articles GROUP BY namespace ORDER BY namespace",
    ),
    (
        "Most used categories",
        "SELECT category, count(*) AS members FROM category_links GROUP BY category "
        "ORDER BY members DESC, category LIMIT 5",
    ),
]


def _section(title: str) -> None:
    click.echo(f"\n=== {title} ===")


@flow(name="odqa-demo")
def demo_flow(workspace: str | None = None) -> dict[str, Any]:
    """Run the pipeline on the bundled sample and print what it produced."""
    ws = Workspace.resolve(workspace)
    _section(f"Ingest {SAMPLE_DUMP.name} into {ws.root}")
    report = ingest_wikipedia_flow(dump=str(SAMPLE_DUMP), workspace=str(ws.root))
    counts = {t: ws.rows(t) for t in ("articles", "passages", "category_links")}
    click.echo(render_counts(counts, report))

    _section("A few passages")
    click.echo(
        render(ws.sql("SELECT passage_id, title, position, text FROM passages ORDER BY article_id, position LIMIT 4"), "table")
    )
    for title, query in SHOWCASE_QUERIES:
        _section(f"SQL: {title}")
        click.echo(f"$ odqa sql \"{query}\"")
        click.echo(render(ws.sql(query), "table"))
    return {"counts": counts}


def render_counts(counts: dict[str, int], report: dict[str, Any]) -> str:
    lines = [f"{table:>15}: {rows}" for table, rows in counts.items()]
    skipped = {k: v for k, v in report.items() if k.startswith("skipped_") and v}
    if skipped:
        lines.append(f"{'skipped':>15}: {skipped}")
    if report.get("noop"):
        lines.append("(ingest was a no-op: the sample was already ingested with these options)")
    return "\n".join(lines)
