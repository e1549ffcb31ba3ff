"""Releases: how a workspace publishes its current indexes to searchers that run for a long time.

A release is a small record naming the index builds of one passages version (the BM25 index, and
each model's FAISS indexes, see `storage.index_layout`) that answer together. Every verb that
builds an index (`odqa bm25 index`, `odqa index build`, `odqa reindex`) publishes the workspace's
current builds as a new release when they differ from the current one:

    indexes/releases/<release>.json   the record, written once
    indexes/current.json              the pointer: a copy of the current record

`publish` writes the record, then replaces the pointer with one atomic rename, under a lock, so a
reader (`odqa serve`) sees the old or the new release and never a mix; a build that fails or is
killed publishes nothing.

Releases never narrow what serves. A new release keeps every retriever of the current one (BM25,
each model's dense index) and its default model, plus what the publishing command built, unless
the publish names the change (`ServingChange`: a retriever dropped by name, a model named as the
new default, which is then pinned and carried into every later release); and it never takes from
a running `odqa serve` (`storage.serving`) the retriever it answers with, named or not. A release
that would is not published: `publish` says what it lacks and for whom, and records that in
`indexes/refused.json` (the service's /health shows it) until a release is published again.

A release also names the passages files its indexes were built from, and pins them
(`table_pins`) while it is kept: a service that loads it after an ingest has replaced those
passages (a re-index still encoding, or withheld) shows the texts its indexes found, not newer
texts under the same ids, and finds every passage it serves.

A rollback (`release_rollback`) publishes a kept release again and holds what it replaced
(`Hold`): a publish of that is not made until newer passages are published or it is unheld.

Old releases are pruned (the newest `keep` stay, so searches that started on them finish; their
passages files are unpinned), and so are the index builds only pruned releases used (`prune_builds`); a build not released yet
(withheld, or still being built by another command) is not an old release's and stays. Two re-indexes
never overlap: `reindex_lock` is taken for a whole re-index; a second one waits up to
`wait_seconds` and is then refused, saying which run holds the lock since when.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .atomic import atomic_write_json
from .index_layout import BM25_DIR, DENSE_DIR, IndexLayout
from .locks import this_command
from .model_registry import resolve_model
from .serving import ServiceRecord, live_services
from .snapshot import HISTORY_KEEP, FileEntry, load_snapshot, recent_snapshots, workspace_lock
from .table_pins import missing_files, set_pins
from .workspace import Workspace

RELEASES_DIR = "releases"
POINTER_FILE = "current.json"
REINDEX_LOCK = ".reindex.lock"
PUBLISH_LOCK = ".publish.lock"
REFUSED_FILE = "refused.json"
HOLD_FILE = "held.json"
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
    pinned_model: str | None = None  # the default model as someone named it; kept by every later release
    pinned_by: str | None = None  # who named it, and when
    dropped: list[str] = field(default_factory=list)  # what this release dropped, by name, from the one before
    passages_files: list[FileEntry] = field(default_factory=list)  # the passages its indexes found (none: older odqa)
    restored_from: str | None = None  # the kept release a rollback published again as this one

    def dense_of(self, model: str) -> DenseRelease | None:
        return next((entry for entry in self.dense if model in (entry.model, entry.model_path, entry.key)), None)

    def retrievers(self) -> list[str]:
        """What it serves, as refusals name it: `bm25`, `dense model M`."""
        return (["bm25"] if self.bm25 else []) + [f"dense model {entry.model}" for entry in self.dense]

    def missing_from(self, other: Release | None) -> list[str]:
        """What `other` serves that this release would not (a retriever a running service would lose)."""
        if other is None:
            return []
        missing = ["bm25"] if other.bm25 and not self.bm25 else []
        return missing + [f"dense model {entry.model}" for entry in other.dense if self.dense_of(entry.model) is None]

    def same_indexes(self, other: Release | None) -> bool:
        """Whether `other` serves exactly the same index builds (publishing again would change nothing)."""
        return other is not None and (self.passages_version, self.bm25, self.dense, self.default_model,
                                      self.pinned_model) == (other.passages_version, other.bm25, other.dense,
                                                             other.default_model, other.pinned_model)  # fmt: skip

    def default_why(self) -> str | None:
        """Why its default model is the default (what /health says)."""
        if self.default_model is None:
            return None
        if self.pinned_model == self.default_model:
            return f"pinned by {self.pinned_by}"
        return "not pinned: the first dense model published, kept since (pin another: odqa release pin --model M)"

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
                   figures=dict(data.get("figures", {})), pinned_model=data.get("pinned_model"),
                   pinned_by=data.get("pinned_by"), dropped=list(data.get("dropped", [])),
                   passages_files=[FileEntry(**entry) for entry in data.get("passages_files", [])],
                   restored_from=data.get("restored_from"))  # fmt: skip


@dataclass(frozen=True)
class ServingChange:
    """What a publish is asked, by name, to change in what serves; nothing named: everything stays.

    What the publishing command built is added (`odqa bm25 index` adds BM25, `odqa index build
    --model M` adds M); a build lying in the workspace that nobody named is not. A model is named
    as the user names it (id, folder, Hugging Face name) or by its index key."""

    default_model: str | None = None  # added, made the default, and pinned
    add_bm25: bool = False
    add_models: tuple[str, ...] = ()
    drop_bm25: bool = False
    drop_models: tuple[str, ...] = ()
    by: str = ""  # who asked (a command), recorded with a pin

    def drops(self, entry: DenseRelease) -> bool:
        return any(name in (entry.model, entry.model_path, entry.key) for name in self.drop_models)

    def adds(self, entry: DenseRelease) -> bool:
        return any(name in (entry.model, entry.model_path, entry.key) for name in (*self.add_models, self.default_model))

    def dropped_from(self, current: Release | None) -> list[str]:
        """What of `current` this change drops, as refusals name it."""
        if current is None:
            return []
        return (["bm25"] if self.drop_bm25 and current.bm25 else []) + [
            f"dense model {entry.model}" for entry in current.dense if self.drops(entry)]


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


def workspace_release(ws: Workspace, passages_version: str, change: ServingChange = ServingChange(),
                      figures: dict[str, Any] | None = None, current: Release | None = None) -> Release:  # fmt: skip
    """The release (not yet published) to follow `current`: what `current` serves and what `change`
    adds, as far as their builds for `passages_version` are finished, less what `change` drops;
    the first release (`current` None) takes every finished build of that version.

    The default model (what a service encodes questions with unless told otherwise) is the one
    `change` names (then pinned), else `current`'s pinned or default model while it has an index
    here, else, when `current` had none, the model whose index was built last."""
    layout = IndexLayout.of(ws)
    wants_bm25 = current is None or bool(current.bm25) or change.add_bm25
    bm25 = (f"{BM25_DIR}/{passages_version}" if wants_bm25 and layout.bm25_built(passages_version)
            and not change.drop_bm25 else None)  # fmt: skip
    dense, built_at = [], {}
    for build in layout.dense_builds(passages_version):
        recorded = layout.recorded_model(build.key) or {"model": build.key, "path": build.key}
        types = build.built_types()
        entry = DenseRelease(model=recorded["model"], model_path=recorded["path"], key=build.key,
                             indexes={t: f"{DENSE_DIR}/{build.key}/{passages_version}/{t}" for t in types},
                             alpha=layout.tuned_alpha(build.key))  # fmt: skip
        wanted = current is None or current.dense_of(build.key) is not None or change.adds(entry)
        if wanted and not change.drops(entry):
            dense.append(entry)
            built_at[entry.model] = max((build.index(t) / "index.json").stat().st_mtime for t in types)
    release = Release(release=new_release_id(passages_version), passages_version=passages_version, bm25=bm25,
                      dense=dense, default_model=None, created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      figures=figures or {}, dropped=change.dropped_from(current))  # fmt: skip
    if change.default_model is not None:
        named = release.dense_of(change.default_model)
        if named is None:
            raise NoReleaseError(f"model {change.default_model!r} has no finished index of passages version "
                                 f"{passages_version}: build it first (odqa index build --model ...)")  # fmt: skip
        return replace(release, default_model=named.model, pinned_model=named.model,
                       pinned_by=f"{change.by or this_command()} at {release.created_at}")
    if current is not None and current.default_model is not None:
        kept = release.dense_of(current.default_model)
        pinned = kept is not None and current.pinned_model == current.default_model
        return replace(release, default_model=kept.model if kept else None,
                       pinned_model=kept.model if pinned else None, pinned_by=current.pinned_by if pinned else None)  # type: ignore[union-attr]  # fmt: skip
    return replace(release, default_model=max(built_at, key=built_at.__getitem__) if built_at else None)


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


@contextlib.contextmanager
def publish_lock(ws: Workspace) -> Iterator[None]:
    """The lock every change of the pointer takes (a publish, a rollback): one at a time."""
    with _file_lock(ws.indexes_dir / PUBLISH_LOCK, wait_seconds=600):
        yield


@dataclass(frozen=True)
class Publication:
    """What `publish` did: the release now current (None before the first), whether it is new,
    what it pruned, and what a release not published would have taken away."""

    release: Release | None
    published: bool
    previous: str | None
    pruned_releases: list[str]
    pruned_builds: list[str]
    withheld: list[str] = field(default_factory=list)  # why a new release was not published
    held: str | None = None  # why not, when a rollback holds its builds (`Hold.describe`)

    @property
    def current(self) -> str | None:
        """The id of the release serving now."""
        return self.release.release if self.release is not None else None


def narrowing(wanted: Release, current: Release | None, services: list[ServiceRecord],
              change: ServingChange) -> list[str]:  # fmt: skip
    """What `wanted` would take from what serves now (see the module doc), each with whom it serves:
    what `current` serves and `change` does not name, a default model `change` does not name, and
    what a running service answers with, named or not. Empty: it may be published."""
    problems = []
    if current is not None:
        named = change.dropped_from(current)
        problems += [f"{lost} (served by release {current.release}; drop it by name to publish without it)"
                     for lost in wanted.missing_from(current) if lost not in named]  # fmt: skip
        if (current.default_model and wanted.dense and wanted.default_model != current.default_model
                and change.default_model is None):  # fmt: skip
            problems.append(f"default model {current.default_model} (of release {current.release}; name the new "
                            "default: odqa reindex --model M or odqa release pin --model M)")  # fmt: skip
    for service in services:
        if service.bm25 and not wanted.bm25:
            problems.append(f"bm25 (answered by {service.describe()}; stop it first)")
        follows_default = service.model is None and bool(wanted.dense)
        if service.dense_model and not follows_default and wanted.dense_of(service.dense_model) is None:
            problems.append(f"dense model {service.dense_model} (answered by {service.describe()}; stop it first)")
    return problems


def publish(ws: Workspace, passages_version: str, *, change: ServingChange = ServingChange(),
            figures: dict[str, Any] | None = None, keep: int = DEFAULT_KEEP) -> Publication:  # fmt: skip
    """Publish the workspace's finished builds for `passages_version` (see the module doc).

    Nothing changes when the current release already serves the same builds. A release that
    would narrow what serves (`narrowing`: new passages with only some of the served indexes
    rebuilt yet, a retriever dropped without naming it, one a running service answers with) is
    withheld, said so in the Publication and recorded (`last_refusal`)."""
    with publish_lock(ws):
        current = current_release(ws)
        forget_unpublished(ws, current)
        wanted = workspace_release(ws, passages_version, change, figures, current)
        if wanted.bm25 is None and not wanted.dense:
            raise NoReleaseError(f"no finished index of passages version {passages_version} to publish in "
                                 f"{ws.indexes_dir}: build one (odqa bm25 index, odqa index build)")  # fmt: skip
        previous = current.release if current else None
        if wanted.same_indexes(current):
            return Publication(current, False, previous, [], [])
        hold = current_hold(ws)
        if hold is not None and hold.holds(wanted):
            return Publication(current, False, previous, [], [], held=hold.describe())
        withheld = narrowing(wanted, current, live_services(ws), change)
        if withheld:
            atomic_write_json(ws.indexes_dir / REFUSED_FILE, {
                "at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "passages_version": passages_version,
                "retrievers": wanted.retrievers(), "lacks": withheld, "by": change.by or this_command()})  # fmt: skip
            return Publication(current, False, previous, [], [], withheld=withheld)
        if hold is not None and hold.release.passages_version != passages_version == ws.table_version("passages"):
            _lift_hold(ws)  # newer passages serve now: the held ones will not come back
        wanted = pin_passages(ws, wanted, current)
        pruned, removed = serve_and_prune(ws, wanted, keep)
    return Publication(wanted, True, previous, pruned, removed)


def pin_default(ws: Workspace, model: str, by: str, keep: int = DEFAULT_KEEP) -> Publication:
    """Publish the current release again with `model` (which it must serve) as its pinned default."""
    current = current_release(ws)
    if current is None:
        raise NoReleaseError(f"nothing is published in {ws.root} yet: build an index first (odqa bm25 index, "
                             "odqa index build --model M, odqa reindex --model M)")  # fmt: skip
    entry = current.dense_of(model) or current.dense_of(resolve_model(ws, model).passage_key)
    if entry is None:
        served = ", ".join(entry.model for entry in current.dense) or "no dense model"
        raise ValueError(f"release {current.release} serves no dense index of {model!r} (it serves {served}): build "
                         f"it first (odqa index build --model {model}), then pin it")  # fmt: skip
    return publish(ws, current.passages_version, change=ServingChange(default_model=entry.key, by=by), keep=keep)


@dataclass(frozen=True)
class Hold:
    """What a rollback took out of serving, kept out until `odqa release unhold`: without it the
    next re-index (scheduled, with nothing new to ingest) would publish the very builds rolled
    back from. A rollback to other passages holds those passages whole (any build over them);
    one to the same passages holds the exact builds of the release rolled back from."""

    release: Release  # the release rolled back from
    by: str
    at: str
    passages_held: bool  # its passages whole (the rollback went to other passages), else its exact builds

    def holds(self, wanted: Release) -> bool:
        """Whether publishing `wanted` would serve what was rolled back from."""
        return self.holds_passages(wanted.passages_version) or wanted.same_indexes(self.release)

    def holds_passages(self, passages_version: str) -> bool:
        """Whether any build over `passages_version` is held (a re-index need not build it)."""
        return self.passages_held and passages_version == self.release.passages_version

    def describe(self) -> str:
        what = (f"passages {self.release.passages_version}" if self.passages_held
                else f"the builds of release {self.release.release}")  # fmt: skip
        return (f"{what} are held: {self.by} rolled back release {self.release.release} at {self.at}; "
                "`odqa release unhold` lets them be published again")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release.to_json(), "by": self.by, "at": self.at, "passages_held": self.passages_held}


def current_hold(ws: Workspace) -> Hold | None:
    """The hold the last rollback left (None: nothing held)."""
    try:
        data = json.loads((ws.indexes_dir / HOLD_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return Hold(release=Release.from_json(data["release"]), by=data["by"], at=data["at"],
                passages_held=bool(data["passages_held"]))  # fmt: skip


def save_hold(ws: Workspace, hold: Hold) -> None:
    """Record `hold` (replacing an earlier one); call under `publish_lock`."""
    atomic_write_json(ws.indexes_dir / HOLD_FILE, hold.to_json())


def _lift_hold(ws: Workspace) -> Hold | None:
    hold = current_hold(ws)
    (ws.indexes_dir / HOLD_FILE).unlink(missing_ok=True)
    return hold


def unhold(ws: Workspace) -> Hold | None:
    """Lift the hold (what it held may be published again by the next build); returns it."""
    with publish_lock(ws):
        return _lift_hold(ws)


def last_refusal(ws: Workspace) -> dict[str, Any] | None:
    """The last release a publish withheld since the current one was published (what it would
    have served, what it lacked and for whom, who published, when), or None."""
    try:
        return json.loads((ws.indexes_dir / REFUSED_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def switch_current(ws: Workspace, release: Release) -> None:
    """Record `release` and point searchers at it (one rename: readers see the old or the new pointer)."""
    atomic_write_json(releases_dir(ws) / f"{release.release}.json", release.to_json())
    atomic_write_json(pointer_path(ws), release.to_json())


def _passages_files_of(ws: Workspace, passages_version: str, current: Release | None) -> list[FileEntry]:
    """The passages files whose table version is `passages_version`: a kept release's record
    (republishing its passages), else the current or a recent snapshot's; empty when none lists
    them any more."""
    for release in (current, *published_releases(ws)):
        if release is not None and release.passages_version == passages_version and release.passages_files:
            return list(release.passages_files)
    history = reversed(recent_snapshots(ws.root, HISTORY_KEEP))
    for snapshot in (load_snapshot(ws.root), *history):
        if snapshot.table_version("passages") == passages_version:
            return snapshot.files("passages")
    return []


def pin_passages(ws: Workspace, release: Release, current: Release | None) -> Release:
    """`release` (about to be published) naming its passages files, pinned with every kept
    release's. Under the workspace lock, so no commit deletes them between finding and pinning.
    Files a commit deleted before (passages replaced more than the kept snapshots ago, under an
    older odqa) are not named: a service then reads the current passages, and says so."""
    with workspace_lock(ws.root):
        files = _passages_files_of(ws, release.passages_version, current)
        if missing_files(ws.root, files):
            files = []
        named = replace(release, passages_files=files)
        _write_pins(ws, [*published_releases(ws), named])
    return named


def serve_and_prune(ws: Workspace, release: Release, keep: int) -> tuple[list[str], list[str]]:
    """Make `release` (its passages pinned, `pin_passages`) the current one, then prune the old
    releases, unpin their passages (the next commit's garbage collection deletes them) and delete
    the builds only they used; the pruned releases and builds. Call under `publish_lock`."""
    switch_current(ws, release)
    (ws.indexes_dir / REFUSED_FILE).unlink(missing_ok=True)
    pruned = prune_releases(ws, keep)
    with workspace_lock(ws.root):
        _write_pins(ws, published_releases(ws))
    return pruned, prune_builds(ws, release.passages_version)


def _write_pins(ws: Workspace, releases: list[Release]) -> None:
    set_pins(ws.root, {r.release: [entry.path for entry in r.passages_files] for r in releases if r.passages_files})


def forget_unpublished(ws: Workspace, current: Release | None) -> list[str]:
    """Delete the records of releases newer than `current` (ids start with their UTC time): a
    publish killed between writing its record and switching the pointer (`switch_current`) left
    one that never served. Kept, it would count among the `keep` newest (an older release that
    did serve pruned too early) and pass for a published release. Called under the publish lock."""
    if current is None or not releases_dir(ws).is_dir():
        return []
    removed = []
    for path in sorted(releases_dir(ws).glob("*.json")):
        if path.stem > current.release:
            path.unlink(missing_ok=True)
            removed.append(path.stem)
    return removed


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


def _release_time(release: Release) -> float:
    """When `release` was published, as a Unix time (its id starts with the UTC time to the
    microsecond; `created_at`, to the second, for an id that does not)."""
    try:
        stamp = datetime.strptime(release.release.split("-", 1)[0], "%Y%m%dT%H%M%S%fZ")
        return stamp.replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        try:
            return datetime.fromisoformat(release.created_at).timestamp()
        except ValueError:
            return 0.0


def _touched(folder: Path) -> float:
    """The last time `folder` or one of its entries changed (a build adds entries as it goes)."""
    times = [folder.stat().st_mtime]
    with contextlib.suppress(OSError):
        times += [entry.stat(follow_symlinks=False).st_mtime for entry in folder.iterdir()]
    return max(times)


def prune_builds(ws: Workspace, passages_version: str) -> list[str]:
    """Delete the index builds that only pruned releases used.

    Kept: the builds of every kept release's passages version, of `passages_version` (the one
    being published) and of the workspace's current passages version, and every build changed
    since the oldest kept release was published. A build no kept release serves is then either
    one an older release used (it existed before that release, so before every kept one) or one
    never released yet: withheld until the other served indexes are rebuilt (`odqa bm25 index`
    on new passages), or still being built by another command (a re-index encoding while
    `odqa release pin` publishes the old passages again). Those are not an old release's to
    delete; they go once they are older than every kept release."""
    kept = published_releases(ws)
    used = {passages_version, *(release.passages_version for release in kept)}
    used.add(ws.table_version("passages"))
    since = min((_release_time(release) for release in kept), default=0.0)
    layout = IndexLayout.of(ws)
    removed = []
    candidates = [d for d in (layout.root / BM25_DIR).glob("*") if d.is_dir()]
    candidates += [d for d in (layout.root / DENSE_DIR).glob("*/*") if d.is_dir()]
    for folder in candidates:
        if folder.name.startswith(".") or folder.name in used:
            continue
        try:
            if _touched(folder) >= since:
                continue
        except FileNotFoundError:  # deleted meanwhile
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder.relative_to(layout.root)))
    return removed
