"""Releases: how a workspace publishes its current indexes to searchers that run for a long time.

A release is a small record naming the index builds of one passages version (the BM25 index, and
each model's FAISS indexes, see `storage.index_layout`) that answer together. Every verb that
builds an index (`odqa bm25 index`, `odqa index build`, `odqa reindex`) publishes the workspace's
current builds as a new release when they differ from the current one:

    indexes/releases/<release>.json   the record, written once
    indexes/current.json              the pointer: a copy of the current record

`publish` writes the record, then replaces the pointer with one atomic rename, under a lock, so a
reader (`odqa serve`) sees the old or the new release and never a mix; a build that fails or is
killed publishes nothing. Old releases are pruned (the newest `keep` stay, so searches that
started on them finish), and so are the index builds no kept release and no current passages
version uses. Two re-indexes never overlap: `reindex_lock` is taken for a whole re-index; a second
one waits up to `wait_seconds` and is then refused, saying which run holds the lock since when.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .atomic import atomic_write_json
from .index_layout import BM25_DIR, DENSE_DIR, IndexLayout
from .workspace import Workspace

RELEASES_DIR = "releases"
POINTER_FILE = "current.json"
REINDEX_LOCK = ".reindex.lock"
PUBLISH_LOCK = ".publish.lock"
DEFAULT_KEEP = 3
RELEASE_FORMAT = 2  # 1: the self-contained release folders of odqa before indexes were published builds


class ReindexBusyError(RuntimeError):
    """Another re-index holds the workspace's re-index lock."""


class NoReleaseError(FileNotFoundError):
    """Nothing has been published yet."""


@dataclass(frozen=True)
class DenseRelease:
    """One model's dense indexes in a release: the model to encode questions with, the folders."""

    model: str  # the model as users name it (id, folder or Hugging Face name)
    model_path: str  # what to load it from
    key: str
    indexes: dict[str, str]  # index type -> folder, relative to indexes/
    alpha: float | None = None  # the model's tuned hybrid alpha when it was published


@dataclass(frozen=True)
class Release:
    """What one published release serves (see the module doc)."""

    release: str
    passages_version: str
    bm25: str | None  # folder of the BM25 index, relative to indexes/
    dense: list[DenseRelease]
    default_model: str | None
    created_at: str
    figures: dict[str, Any] = field(default_factory=dict)

    def dense_of(self, model: str) -> DenseRelease | None:
        return next((entry for entry in self.dense if model in (entry.model, entry.model_path, entry.key)), None)

    def missing_from(self, other: Release | None) -> list[str]:
        """What `other` serves that this release would not (a retriever a running service would lose)."""
        if other is None:
            return []
        missing = ["bm25"] if other.bm25 and not self.bm25 else []
        return missing + [f"dense model {entry.model}" for entry in other.dense if self.dense_of(entry.model) is None]

    def same_indexes(self, other: Release | None) -> bool:
        """Whether `other` serves exactly the same index builds (publishing again would change nothing)."""
        return other is not None and (self.passages_version, self.bm25, self.dense, self.default_model) == (
            other.passages_version, other.bm25, other.dense, other.default_model)

    def to_json(self) -> dict[str, Any]:
        return {"format": RELEASE_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Release:
        if data.get("format") != RELEASE_FORMAT:
            raise ValueError(f"release {data.get('release')!r} was written by an older odqa (format "
                             f"{data.get('format', 1)}, expected {RELEASE_FORMAT}); publish the workspace's indexes "
                             "again: odqa reindex (or odqa bm25 index / odqa index build)")  # fmt: skip
        dense = [DenseRelease(**entry) for entry in data.get("dense", [])]
        return cls(release=data["release"], passages_version=data["passages_version"], bm25=data.get("bm25"),
                   dense=dense, default_model=data.get("default_model"), created_at=data.get("created_at", ""),
                   figures=dict(data.get("figures", {})))  # fmt: skip


def releases_dir(ws: Workspace) -> Path:
    return ws.indexes_dir / RELEASES_DIR


def pointer_path(ws: Workspace) -> Path:
    return ws.indexes_dir / POINTER_FILE


def read_pointer(path: Path) -> Release | None:
    """The release a pointer file names (None when there is none yet)."""
    try:
        return Release.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None


def current_release(ws: Workspace) -> Release | None:
    """What `current.json` points at: None before the first publish, and for a pointer an older
    odqa wrote (the next publish replaces it)."""
    try:
        return read_pointer(pointer_path(ws))
    except ValueError:
        return None


def new_release_id(passages_version: str) -> str:
    return f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%fZ')}-{passages_version[:8]}"


def workspace_release(ws: Workspace, passages_version: str, default_model: str | None = None,
                      figures: dict[str, Any] | None = None) -> Release:  # fmt: skip
    """The release of the workspace's finished builds for `passages_version` (not yet published).

    The default model (what a service encodes questions with unless told otherwise) is
    `default_model` when it has an index here, else the current release's when it still has one,
    else the model whose index was built last."""
    layout = IndexLayout.of(ws)
    bm25 = f"{BM25_DIR}/{passages_version}" if layout.bm25_built(passages_version) else None
    dense, built_at = [], {}
    for build in layout.dense_builds(passages_version):
        recorded = layout.recorded_model(build.key) or {"model": build.key, "path": build.key}
        types = build.built_types()
        dense.append(DenseRelease(model=recorded["model"], model_path=recorded["path"], key=build.key,
                                  indexes={t: f"{DENSE_DIR}/{build.key}/{passages_version}/{t}" for t in types},
                                  alpha=layout.tuned_alpha(build.key)))  # fmt: skip
        built_at[recorded["model"]] = max((build.index(t) / "index.json").stat().st_mtime for t in types)
    current = current_release(ws)
    candidates = [default_model, current.default_model if current else None,
                  max(built_at, key=built_at.__getitem__) if built_at else None]  # fmt: skip
    chosen = next((m for m in candidates if m is not None and m in built_at), None)
    return Release(release=new_release_id(passages_version), passages_version=passages_version, bm25=bm25,
                   dense=dense, default_model=chosen,
                   created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), figures=figures or {})  # fmt: skip


@contextlib.contextmanager
def _file_lock(path: Path, wait_seconds: float, busy: str | None = None, holder: str = "") -> Iterator[None]:
    """An exclusive lock on `path`: waits up to `wait_seconds`, then raises ReindexBusyError
    with `busy` (a text naming the holder written into the file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as handle:
        deadline = time.monotonic() + max(0.0, wait_seconds)
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    who = handle.read().strip() or "another process"
                    raise ReindexBusyError((busy or "{who}").format(who=who)) from None
                time.sleep(0.05)
        try:
            if holder:
                handle.seek(0)
                handle.truncate()
                handle.write(f"pid {os.getpid()}, {holder}, since "
                             f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}")  # fmt: skip
                handle.flush()
            yield
        finally:
            if holder:
                handle.seek(0)
                handle.truncate()
                handle.flush()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def reindex_lock(ws: Workspace, wait_seconds: float = 0.0, holder: str = "") -> Iterator[None]:
    """Exclusive re-index lock; waits up to `wait_seconds`, then ReindexBusyError."""
    busy = (f"a re-index of {ws.root} is already running ({{who}}); this one was refused after waiting "
            f"{wait_seconds:.0f}s. Wait for it to finish, or pass a longer wait_seconds.")  # fmt: skip
    with _file_lock(ws.indexes_dir / REINDEX_LOCK, wait_seconds, busy, holder or "a re-index"):
        yield


@dataclass(frozen=True)
class Publication:
    """What `publish` did: the release now current, whether it is new, what it pruned."""

    release: Release
    published: bool
    previous: str | None
    pruned_releases: list[str]
    pruned_builds: list[str]
    withheld: list[str] = field(default_factory=list)  # why a new release was not published


def publish(ws: Workspace, passages_version: str, *, default_model: str | None = None,
            figures: dict[str, Any] | None = None, keep: int = DEFAULT_KEEP,
            narrower: bool = False) -> Publication:  # fmt: skip
    """Publish the workspace's finished builds for `passages_version` (see the module doc).

    Nothing changes when the current release already serves the same builds. A release that
    would serve less than the current one (new passages with only some of its indexes rebuilt
    yet) is withheld, so a running service never loses a retriever; a re-index, which rebuilds
    what it is asked to, publishes it anyway (`narrower`)."""
    with _file_lock(ws.indexes_dir / PUBLISH_LOCK, wait_seconds=600):
        current = current_release(ws)
        wanted = workspace_release(ws, passages_version, default_model, figures)
        if wanted.bm25 is None and not wanted.dense:
            raise NoReleaseError(f"no finished index of passages version {passages_version} to publish in "
                                 f"{ws.indexes_dir}: build one (odqa bm25 index, odqa index build)")  # fmt: skip
        previous = current.release if current else None
        if wanted.same_indexes(current):
            return Publication(current, False, previous, [], [])  # type: ignore[arg-type]
        missing = wanted.missing_from(current)
        if missing and not narrower:
            return Publication(current, False, previous, [], [], withheld=missing)  # type: ignore[arg-type]
        switch_current(ws, wanted)
        pruned = prune_releases(ws, keep)
        removed = prune_builds(ws, passages_version)
    return Publication(wanted, True, previous, pruned, removed)


def switch_current(ws: Workspace, release: Release) -> None:
    """Record `release` and point searchers at it (one rename: readers see the old or the new pointer)."""
    atomic_write_json(releases_dir(ws) / f"{release.release}.json", release.to_json())
    atomic_write_json(pointer_path(ws), release.to_json())


def published_releases(ws: Workspace) -> list[Release]:
    """Every kept release, oldest first."""
    folder = releases_dir(ws)
    if not folder.is_dir():
        return []
    return [Release.from_json(json.loads(p.read_text(encoding="utf-8"))) for p in sorted(folder.glob("*.json"))]


def prune_releases(ws: Workspace, keep: int) -> list[str]:
    """Forget all but the newest `keep` releases (never the current one)."""
    current = current_release(ws)
    records = sorted(releases_dir(ws).glob("*.json"))
    removed = []
    for path in records[: max(0, len(records) - max(keep, 1))]:
        if current is None or path.stem != current.release:
            path.unlink(missing_ok=True)
            removed.append(path.stem)
    return removed


def prune_builds(ws: Workspace, passages_version: str) -> list[str]:
    """Delete index builds of other passages versions that no kept release uses."""
    used = {passages_version}
    for release in published_releases(ws):
        used.add(release.passages_version)
    layout = IndexLayout.of(ws)
    removed = []
    candidates = [d for d in (layout.root / BM25_DIR).glob("*") if d.is_dir()]
    candidates += [d for d in (layout.root / DENSE_DIR).glob("*/*") if d.is_dir()]
    for folder in candidates:
        if folder.name.startswith(".") or folder.name in used:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder.relative_to(layout.root)))
    return removed
