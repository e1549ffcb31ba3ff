"""What the last Wikipedia ingest of a re-index saw, page by page: the base of the next incremental ingest.

`<workspace>/ingest/pages.parquet` holds (page id, content hash) of every page of the dump that
made the current Wikipedia rows, and `pages.json` which passages version and ingest options they
describe. A later re-index cleans again only the pages whose hash changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .atomic import atomic_write_json
from .workspace import Workspace

INGEST_DIR = "ingest"
PAGES_FILE = "pages.parquet"
PAGES_META = "pages.json"


def page_hashes_file(ws: Workspace) -> Path:
    return ws.root / INGEST_DIR / PAGES_FILE


def page_hashes_meta(ws: Workspace) -> dict[str, Any] | None:
    """What the page hashes describe (passages_version, options, dump), None when there are none."""
    path = ws.root / INGEST_DIR / PAGES_META
    if not path.is_file() or not page_hashes_file(ws).is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def record_page_hashes(ws: Workspace, meta: dict[str, Any]) -> None:
    atomic_write_json(ws.root / INGEST_DIR / PAGES_META, meta)


def forget_page_hashes(ws: Workspace) -> None:
    """The page hashes no longer describe the tables (the next ingest cleans every page)."""
    (ws.root / INGEST_DIR / PAGES_META).unlink(missing_ok=True)
