"""`odqa bm25 index`: the Lucene BM25 index of the passages, published to running searchers."""

from __future__ import annotations

import click

from .groups import bm25_group, workspace_arg
from .report import echo_report


@bm25_group.command("index")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Indexing threads (default: all cores).")
@click.pass_context
def bm25_index(ctx: click.Context, threads: int | None) -> None:
    """Index every passage (title + text) with positions, doc vectors and raw text stored."""
    from ..stages.bm25 import bm25_index_flow

    echo_report("bm25 index", bm25_index_flow(workspace=workspace_arg(ctx), threads=threads))
