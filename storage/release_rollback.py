"""Rolling back: serve a kept release again, and keep what it replaces from coming back.

A re-index that published something wrong (a broken dump, a worse model) is undone by publishing
an earlier kept release again, under a new id that names it (`restored_from`), so services switch
to it as to any release and the history stays in order. Its index builds and passages are still
there: a kept release's builds are not pruned (`prune_builds`) and its passages are pinned
(`table_pins`). The rollback then holds what it rolled back from (`releases.Hold`): the next
scheduled re-index, with nothing new to ingest, would otherwise rebuild nothing and publish those
very builds again. New passages (a fixed dump) are not held, and `odqa release unhold` lifts it.

Like every publish, a rollback does not take from a running service the retriever it answers
with; what the earlier release lacks beside that is dropped by name (the rollback names it).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from .index_layout import BM25_METADATA, FAISS_METADATA
from .releases import (
    DEFAULT_KEEP,
    Hold,
    NoReleaseError,
    Publication,
    Release,
    ServingChange,
    current_hold,
    current_release,
    forget_unpublished,
    narrowing,
    new_release_id,
    pin_passages,
    publish_lock,
    published_releases,
    save_hold,
    serve_and_prune,
)
from .serving import live_services
from .table_pins import missing_files
from .workspace import Workspace


class RollbackRefused(ValueError):
    """The rollback cannot be done; nothing changed. The message says why and what to do."""


def rollback_target(kept: list[Release], current: Release, to: str | None, hold: Hold | None) -> Release:
    """The kept release to serve again: `to` (its id, or a prefix only one id has), else the newest
    one published before `current` that serves other builds (a republish of the same builds, a
    pin say, would change nothing) and is not held: a second rollback right after the first (two
    operators, one click too many) goes further back, not back to what the first rolled back from.
    That undo is asked for by name (`to`)."""
    others = [r for r in kept if r.release != current.release]
    listed = ", ".join(r.release for r in others) or "none"
    if to is None:
        earlier = [r for r in others if r.release < current.release and not r.same_indexes(current)
                   and not (hold is not None and hold.holds(r))]  # fmt: skip
        if not earlier:
            raise RollbackRefused(f"no kept release before {current.release} serves other builds and is not held "
                                  f"(kept: {listed}); name one: odqa release rollback --to R")  # fmt: skip
        return earlier[-1]
    named = [r for r in kept if r.release.startswith(to)]
    if len(named) != 1:
        why = "names no kept release" if not named else f"names {len(named)} kept releases"
        raise RollbackRefused(f"{to!r} {why} (kept: {listed}); older releases were pruned with their builds")
    if named[0].release == current.release:
        raise RollbackRefused(f"release {current.release} is the current one already")
    return named[0]


def unservable(ws: Workspace, release: Release) -> list[str]:
    """What of `release` is gone from the workspace (it cannot serve again without it)."""
    folders = ([release.bm25] if release.bm25 else []) + [f for e in release.dense for f in e.indexes.values()]
    gone = [f"index {folder}" for folder in folders
            if not any((ws.indexes_dir / folder / name).is_file() for name in (BM25_METADATA, FAISS_METADATA))]  # fmt: skip
    gone += [f"passages file {path}" for path in missing_files(ws.root, release.passages_files)]
    if not release.passages_files and ws.table_version("passages") != release.passages_version:
        gone.append(f"passages {release.passages_version} (an older odqa published it without naming their files, "
                    "and the passages table has changed since)")  # fmt: skip
    return gone


def rollback(ws: Workspace, to: str | None = None, *, by: str, keep: int = DEFAULT_KEEP) -> Publication:
    """Publish the kept release `to` (default: the one before the current one, see
    `rollback_target`) again as a new release, and hold what the current one serves (`Hold`).
    Refused, changing nothing, when its builds or passages are gone or it would take from a
    running service the retriever it answers with."""
    with publish_lock(ws):
        current = current_release(ws)
        if current is None:
            raise NoReleaseError(f"nothing is published in {ws.root} yet: there is nothing to roll back")
        forget_unpublished(ws, current)
        target = rollback_target(published_releases(ws), current, to, current_hold(ws))
        gone = unservable(ws, target)
        if gone:
            raise RollbackRefused(f"release {target.release} cannot serve again: {'; '.join(gone)} gone")
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        restored = replace(target, release=new_release_id(target.passages_version), created_at=now, figures={},
                           dropped=target.missing_from(current), restored_from=target.release)  # fmt: skip
        lost = narrowing(restored, None, live_services(ws), ServingChange())
        if lost:
            raise RollbackRefused(f"release {target.release} would not serve {'; '.join(lost)}")
        restored = pin_passages(ws, restored, target)
        hold = Hold(release=current, by=by, at=now, passages_held=current.passages_version != target.passages_version)
        save_hold(ws, hold)  # before the switch: killed in between, the next re-index still publishes nothing
        pruned, removed = serve_and_prune(ws, restored, keep)
    return Publication(restored, True, current.release, pruned, removed, held=hold.describe())
