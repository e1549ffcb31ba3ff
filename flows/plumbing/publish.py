"""Publishing the workspace's indexes after a build, so running searchers pick them up.

`odqa bm25 index`, `odqa index build` and `odqa reindex` end here: the builds of the current
passages become the current release (`storage.releases`), which a running `odqa serve` follows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...storage import Workspace
from ...storage.releases import Publication, publish
from .console import tell


def publish_indexes(ws: Workspace, passages_version: str, *, default_model: str | None = None,
                    figures: dict[str, Any] | None = None, keep: int = 3, narrower: bool = False) -> Publication:  # fmt: skip
    """Publish the current builds (a no-op when the current release serves exactly these; withheld,
    and said so, while the new passages lack an index the current release serves)."""
    done = publish(ws, passages_version, default_model=default_model, figures=figures, keep=keep, narrower=narrower)
    if done.published:
        tell("published index release %s (%s)", done.release.release, _describe(done))
    elif done.withheld:
        tell("not publishing the indexes of the new passages yet: the current release %s also serves %s, "
             "not rebuilt for them (odqa bm25 index / odqa index build --model M, or odqa reindex)",
             done.previous, ", ".join(done.withheld))  # fmt: skip
    return done


def _describe(done: Publication) -> str:
    """`bm25 + dense dpr, taser`: what the release serves, models by their short names."""
    release = done.release
    parts = (["bm25"] if release.bm25 else []) + (
        ["dense " + ", ".join(sorted(Path(entry.model).name for entry in release.dense))] if release.dense else [])
    pruned = f"; {len(done.pruned_releases)} old release(s) pruned" if done.pruned_releases else ""
    return " + ".join(parts) + pruned
