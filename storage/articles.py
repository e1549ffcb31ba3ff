"""Reads of the `articles` and `category_links` tables that stages share."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .workspace import Workspace


def content_titles(ws: Workspace) -> pa.Array:
    """Titles of the articles a coverage counts: non-redirect namespace-0 pages (from `articles`,
    else the pages `category_links` knows)."""
    if ws.rows("articles"):
        table = ws.read_table("articles", columns=["title", "namespace", "is_redirect"])
        keep = pc.and_(pc.equal(table["namespace"], 0), pc.invert(pc.fill_null(table["is_redirect"], False)))
        return table.filter(keep).column("title").combine_chunks()
    table = ws.read_table("category_links", columns=["title", "namespace"])
    return pc.unique(table.filter(pc.equal(table["namespace"], 0)).column("title"))


def redirects(ws: Workspace) -> pa.Table | None:
    """title -> redirect_target of every redirect page, None when no articles were ingested."""
    if ws.rows("articles") == 0:
        return None
    return ws.read_table("articles", columns=["title", "redirect_target"], filter=pc.field("is_redirect"))
