"""Publishing the workspace's indexes after a build, so running searchers pick them up.

`odqa bm25 index`, `odqa index build`, `odqa release pin` and `odqa reindex` end here: the builds
of the current passages become the current release (`storage.releases`), which a running
`odqa serve` follows, unless that release would narrow what serves (then it is withheld, and the
terminal says what it lacks and for whom).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...storage import Workspace
from ...storage.releases import Publication, ServingChange, publish
from .console import tell


def publish_indexes(ws: Workspace, passages_version: str, *, change: ServingChange = ServingChange(),
                    figures: dict[str, Any] | None = None, keep: int = 3) -> Publication:  # fmt: skip
    """Publish the current builds (a no-op when the current release serves exactly these; withheld,
    and said so, while the new release would narrow what serves)."""
    done = publish(ws, passages_version, change=change, figures=figures, keep=keep)
    if done.published:
        tell("published index release %s (%s)", done.current, _describe(done))
    elif done.held:
        tell("not publishing the indexes of passages %s: %s", passages_version, done.held)
    elif done.withheld:
        tell("not publishing the indexes of passages %s: the release would lack %s. Build what it lacks "
             "(odqa bm25 index / odqa index build --model M, or odqa reindex), or drop it by name "
             "(odqa reindex --drop-bm25 / --drop-model M)", passages_version, "; ".join(done.withheld))  # fmt: skip
    return done


def _describe(done: Publication) -> str:
    """`bm25 + dense dpr, taser; default dpr (pinned)`: what the release serves, models by their short
    names, with the default model when someone named it."""
    release = done.release
    if release is None:
        return "nothing"
    parts = (["bm25"] if release.bm25 else []) + (
        ["dense " + ", ".join(sorted(Path(entry.model).name for entry in release.dense))] if release.dense else [])
    default = f"; default {Path(release.pinned_model).name} (pinned)" if release.pinned_model else ""
    dropped = f"; dropped {', '.join(release.dropped)}" if release.dropped else ""
    pruned = f"; {len(done.pruned_releases)} old release(s) pruned" if done.pruned_releases else ""
    return " + ".join(parts) + default + dropped + pruned
