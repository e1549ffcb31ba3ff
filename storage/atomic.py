"""Atomic writes: the only way odqa puts a file or a folder where readers may look.

Every writer in the project (table parts, snapshots, index builds, embeddings shards, model
folders, release pointers, plots) goes through these helpers, so a killed process leaves either
the old content or the new one under a name, never a half-written file: content is written under
a temporary sibling name (same directory, hence same filesystem), flushed to disk, then renamed
into place with one `os.replace`.

A write that finds the disk full (or the user's quota spent) is reported naming the file or
folder being written and the space left on its file system (`DiskFullError`): the operating
system's own error names no path when it comes from a `write`.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import io
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from .sizes import format_bytes


def slug(text: str, empty: str = "item") -> str:
    """A file-name-safe form of a name (model ids, run names, stage names): one meaning everywhere."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or empty


def process_alive(pid: int) -> bool:
    """Whether a process of this host has this pid (folders named by their builder's pid use it
    to find the ones a dead builder left)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DiskFullError(OSError):
    """No space (or quota) left while writing a path; the message names it and the free space."""

    def __str__(self) -> str:
        return str(self.strerror)


class KeptFreeError(DiskFullError):
    """A write refused to keep space free (`ensure_room`): the disk is not full yet, and the
    message already says what was wanted and why it stopped, so no outer `naming_full_disk`
    renames it."""


_FULL_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded"}


def _nearest_folder(path: Path) -> Path:
    """The folder holding `path`, or its nearest ancestor that exists (a folder not made yet)."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _free_space(path: Path) -> str:
    """`N free of M` on the file system holding `path`."""
    try:
        usage = shutil.disk_usage(_nearest_folder(path))
    except OSError:
        return "free space unknown"
    return f"{format_bytes(usage.free)} free of {format_bytes(usage.total)}"


@contextlib.contextmanager
def naming_full_disk(path: Path | str) -> Iterator[None]:
    """Re-raise "no space left on device" and "disk quota exceeded" from the block as a
    `DiskFullError` that names `path` (what the block writes) and the space left; nested, the
    outermost names it (the export a user asked for, not its temporary file)."""
    try:
        yield
    except OSError as error:
        if error.errno not in _FULL_ERRNOS or isinstance(error, KeptFreeError):
            raise
        path = Path(path)
        raise DiskFullError(error.errno, f"{path}: {_FULL_ERRNOS[error.errno]} while writing it ({_free_space(path)} "
                                         "on its file system); free some space or write elsewhere") from error  # fmt: skip


def ensure_room(path: Path | str, more: int, keep_free: int, what: str) -> None:
    """Refuse, as a `KeptFreeError` naming `path`, to write `more` bytes to it when that would
    leave less than `keep_free` on its file system: a long write (a download of gigabytes, or one
    of no known size) stops with a clear message while the disk still has room, instead of filling
    it and failing every other writer. `what` says why the bytes are wanted."""
    path = Path(path)
    if more + keep_free > shutil.disk_usage(_nearest_folder(path)).free:
        raise KeptFreeError(errno.ENOSPC, f"{path}: {what}, but its file system has {_free_space(path)} and "
                                            f"{format_bytes(keep_free)} is kept free; free some space or write "
                                            "elsewhere")  # fmt: skip


def _temporary_sibling(path: Path, kind: str = "tmp") -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.{kind}")


def stale_sibling_name(target: Path, kind: str) -> Path:
    """A fresh hidden sibling of `target` for this process to build it in
    (`.<name>.<id>.<kind>-<pid>`), which `reclaim_stale_siblings` deletes once the pid is gone."""
    return _temporary_sibling(target, f"{kind}-{os.getpid()}")


def reclaim_stale_siblings(target: Path, kind: str) -> list[Path]:
    """Delete what killed writers of `target` left beside it: their `stale_sibling_name` siblings
    (files or folders, and the temporary files of atomic writes into them) whose pid no longer
    runs on this host (or that name none). A live writer's are left alone. Returns what was
    deleted."""
    name = glob.escape(target.name)
    removed = []
    for pattern in (f".{name}.*.{kind}*", f"..{name}.*.{kind}-*.tmp"):
        for stale in target.parent.glob(pattern):
            pid = stale.name.rpartition(f".{kind}-")[2].split(".", 1)[0]
            if pid.isdigit() and process_alive(int(pid)):
                continue
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)
            removed.append(stale)
    return removed


@contextlib.contextmanager
def atomic_file(path: Path | str) -> Iterator[IO[bytes]]:
    """A binary handle whose content appears under `path` when the block ends without error
    (streamed writers: Parquet writers, CSV, numpy); on an error nothing appears."""
    path = Path(path)
    tmp = _temporary_sibling(path)
    try:
        with naming_full_disk(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_text_file(path: Path | str, newline: str | None = None) -> Iterator[IO[str]]:
    """`atomic_file` for text (UTF-8): a text handle over the temporary file."""
    with atomic_file(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline=newline)
        try:
            yield text
            text.flush()
        finally:
            text.detach()  # the binary handle is synced and closed by atomic_file


def atomic_write(path: Path | str, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write a file through `write(handle)` so that `path` appears only complete."""
    with atomic_file(path) as handle:
        write(handle)
    return Path(path)


def atomic_write_bytes(path: Path | str, data: bytes) -> Path:
    return atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: Path | str, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path | str, value: Any) -> Path:
    return atomic_write_text(path, json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def write_parquet_atomic(data: pa.Table, path: Path | str, compression: str = "zstd") -> Path:
    """A complete Parquet file, visible under `path` only once fully written."""
    return atomic_write(path, lambda handle: pq.write_table(data, handle, compression=compression))


REPLACED = "old"  # the kind of the older folder `replace_directory` renames aside


def recover_replaced(target: Path) -> None:
    """Clear what a killed `replace_directory` left of `target`'s swap (only a dead pid's).

    Killed between its two renames, it left no `target` and the older, complete folder renamed
    aside: that is put back, so `target` is as it was before. Killed later, while deleting the
    older folder, it left that folder half deleted beside a complete `target`: it is deleted."""
    name = glob.escape(target.name)
    for old in sorted(target.parent.glob(f".{name}.*.{REPLACED}-*")):
        pid = old.name.rpartition(f".{REPLACED}-")[2]
        if not pid.isdigit() or process_alive(int(pid)) or not old.is_dir() or old.is_symlink():
            continue
        if not target.exists() and not target.is_symlink():
            os.replace(old, target)
        else:
            shutil.rmtree(old, ignore_errors=True)


def replace_directory(staging: Path, target: Path) -> None:
    """Move a fully written `staging` folder to `target`, replacing an older `target`.

    The older folder is first renamed aside and deleted after the switch, so `target` names a
    complete folder at every moment but one rename apart. What a kill leaves of a swap (the
    older folder renamed aside, put back or half deleted) is cleared by `recover_replaced`.
    """
    if target.exists():
        old = stale_sibling_name(target, REPLACED)  # (named after this pid: `recover_replaced` finds it)
        os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, target)


@contextlib.contextmanager
def building_directory(target: Path) -> Iterator[Path]:
    """A fresh sibling folder to build `target` in; swapped into place when the block succeeds,
    deleted when it fails. The folder is named after its builder's pid: a killed build leaves a
    hidden `.building-<pid>` folder that the next build of the same target clears, while a build
    still running elsewhere keeps its folder (two live builds both finish; the last swap wins)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    recover_replaced(target)
    reclaim_stale_siblings(target, "building")
    staging = _temporary_sibling(target, f"building-{os.getpid()}")
    staging.mkdir()
    try:
        with naming_full_disk(target):
            yield staging
            replace_directory(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
