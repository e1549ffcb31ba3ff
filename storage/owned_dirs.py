"""Folders that belong to one live process, reclaimed once that process is gone.

A transaction's staging folder (`staging/<stage>-<uuid>/`) and a stage's scratch folder
(`tmp/<purpose>-<uuid>/`) are removed by the process that made them when it finishes or fails.
A process killed with SIGKILL (or by the OOM killer, or a power cut) removes nothing, and each
run names its folder anew, so such folders were never removed: every killed import of a large
file left its staged Parquet parts and DuckDB spill (gigabytes for DPR's nq-train) on the disk.

Each such folder therefore holds an owner file, `.owner.lock`, on which its maker keeps an
exclusive `flock` for as long as it uses the folder. The kernel drops that lock the moment the
process dies, so the next process that makes a folder in the same place removes every folder
whose owner file it can lock: its owner is gone, whatever the pid was. No pid or age is
guessed, and a live owner's folder is never touched. The `flock` may be per machine (as with the
writer locks of `locks.py`), so only folders made on this host are judged: on a workspace shared
by several machines, each reclaims its own.

A folder is made under a hidden name and renamed into place only once its owner file is locked,
so a reclaimer never sees a folder whose owner has not locked it yet. Folders without an owner
file (made by an older odqa, or by a resumable stage, whose staging must outlive a crash) are
left alone.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path
from typing import IO

OWNER_FILE = ".owner.lock"
_RECLAIMED = ".reclaimed-"  # in the hidden name a folder being removed has


class OwnedDir:
    """A folder held by this process through the flock on its owner file; `release` removes it."""

    def __init__(self, path: Path, handle: IO[str]) -> None:
        self.path = path
        self._handle: IO[str] | None = handle

    @classmethod
    def create(cls, parent: Path, name: str) -> OwnedDir:
        """Make `parent/name` with its owner file locked, after reclaiming the abandoned folders
        beside it."""
        parent.mkdir(parents=True, exist_ok=True)
        reclaim_abandoned(parent)
        building = parent / f".{name}.creating-{uuid.uuid4().hex[:8]}"
        building.mkdir()
        handle = open(building / OWNER_FILE, "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: no one else holds it
            handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}))
            handle.flush()
            target = parent / name
            building.rename(target)
        except BaseException:
            handle.close()
            shutil.rmtree(building, ignore_errors=True)
            raise
        return cls(target, handle)

    def release(self, remove: bool = True) -> None:
        """Remove the folder (unless `remove` is False: it is kept for a later run) and drop the lock."""
        if remove:
            shutil.rmtree(self.path, ignore_errors=True)
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _owner_is_gone(owner: Path) -> IO[str] | None:
    """The owner file opened and locked when its owner, a process of this host, no longer holds
    it, else None. A folder another host made is never judged here: on a file system shared by
    several machines an flock may be seen by its own machine only (as `locks.py` says)."""
    try:
        handle = open(owner, encoding="utf-8")  # noqa: SIM115 (closed by the caller)
    except OSError:
        return None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        if json.loads(handle.read() or "{}").get("host") != socket.gethostname():
            raise OSError("made on another host")
    except (OSError, ValueError, AttributeError):
        handle.close()
        return None
    return handle


def reclaim_abandoned(parent: Path) -> list[str]:
    """Remove the folders in `parent` whose owner file no live process holds; their names.

    Each is first renamed to a hidden name (so no other reclaimer or reader takes it meanwhile),
    then deleted; such a hidden folder left by a reclaimer that was stopped is deleted too. Other
    hidden entries and folders without an owner file are left alone.
    """
    reclaimed: list[str] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return reclaimed
    for entry in entries:
        if _RECLAIMED in entry.name and entry.name.startswith(".") and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)  # a reclaimer stopped while it deleted this one
            continue
        if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
            continue
        handle = _owner_is_gone(entry / OWNER_FILE)
        if handle is None:
            continue
        try:
            doomed = parent / f".{entry.name}{_RECLAIMED}{uuid.uuid4().hex[:8]}"
            try:
                entry.rename(doomed)
            except OSError:
                continue
            shutil.rmtree(doomed, ignore_errors=True)
            reclaimed.append(entry.name)
        finally:
            handle.close()
    return reclaimed
