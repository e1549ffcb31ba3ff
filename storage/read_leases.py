"""Table files kept while a running process reads them: one lease per read, gone with its reader.

A commit deletes the table files that neither the last few snapshots nor a published release list
(`tables._collect_garbage`). A build reads one passages version for hours: it encodes it, writes
its keys, builds BM25 over it and publishes it, while imports and other stages keep committing.
Three commits later its files would be deleted under it and the run would fail half-way. Or, if
it read the table afresh, it would mix two versions in one index. So a reader leases the files of
the one snapshot it reads, for as long as it reads them:

    tables/_leases/<host>-<pid>-<id>.json   {host, pid, started, since, command, what, paths}

The garbage collection keeps every file a live lease names. A lease whose reader is gone (killed,
crashed) is dropped by the next collection:
- on this host, by its pid and the process's start time (a reused pid is another process);
- from another host (a workspace on shared storage), once its holder has not refreshed it
  (every `REFRESH_S`) for `STALE_S`.

Leases are written and collected under one lock (`tables/_leases/.lock`): a reader checks its
files and writes its lease under it, and the collection reads the leases and deletes under it. So
once a reader holds its lease, no collection can delete its files. A workspace this process
cannot write (read-only storage) or whose disk is full takes no lease: no commit of this process
can delete files there.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .atomic import atomic_write_json, process_alive, slug
from .locks import holder_text, this_command
from .snapshot import HISTORY_KEEP, Snapshot, exclusive_file_lock, load_snapshot, recent_snapshots
from .table_files import TABLES_DIR

LEASES_DIR = "_leases"
LOCK_FILE = ".lock"
REFRESH_S = 60.0  # how often a reader refreshes its leases (what readers on other hosts rely on)
STALE_S = 600.0  # a lease from another host not refreshed for this long belongs to a dead reader
# where no lease can be written the read goes on without one: storage this process may not write
# (none of its commits deletes there), or a full disk (no commit completes there either)
_NO_LEASE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}
MAX_LEASE_BYTES = 16 << 20  # a lease names a snapshot's files: far less, whatever the table's size


class TableVersionGone(FileNotFoundError):
    """The files of the table version a reader asked for are no longer in the workspace."""


def leases_dir(root: Path) -> Path:
    return root / TABLES_DIR / LEASES_DIR


@contextlib.contextmanager
def leases_locked(root: Path, timeout_s: float = 600.0) -> Iterator[None]:
    """The lock leases are written and collected under (see the module's docstring)."""
    folder = leases_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    with exclusive_file_lock(folder / LOCK_FILE, timeout_s, f"the read leases of {root}"):
        yield


def process_start(pid: int) -> str | None:
    """The start time of this host's process `pid` (clock ticks after boot, from /proc), so a
    reused pid is told from the reader that held it; None when no such process runs (or it is a
    zombie), or where /proc does not exist."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _reader_alive(record: dict, refreshed: float) -> bool:
    if not record:
        return False
    if record.get("host") != socket.gethostname():
        return time.time() - refreshed < STALE_S
    pid = record.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    if not Path("/proc/self/stat").exists():  # no /proc (not Linux): the pid alone
        return process_alive(pid)
    return process_start(pid) == record.get("started")


def _leases(root: Path) -> Iterator[tuple[Path, dict, bool]]:
    """Each entry of the leases folder: its path, its record ({} where it is no lease odqa
    wrote) and whether its reader is alive."""
    folder = leases_dir(root)
    for path in folder.glob("*.json") if folder.is_dir() else ():
        record, refreshed = _read_lease(path)
        if record is not None:
            yield path, record, _reader_alive(record, refreshed)


def leased_paths(root: Path) -> set[str]:
    """Every file a live reader's lease names; the leases of dead readers are deleted. Call under
    `leases_locked`, and delete files only before releasing it."""
    keep: set[str] = set()
    for path, record, alive in _leases(root):
        if alive:
            keep.update(record["paths"])
        elif path.is_symlink() or not path.is_dir():  # (a folder of that name is left to its maker)
            with contextlib.suppress(OSError):
                path.unlink()
    return keep


def _read_lease(path: Path) -> tuple[dict | None, float]:
    """A lease file's record and when it was last refreshed; a record of a dead reader's (it is
    dropped) where the entry is no lease as odqa writes it (a hand edit, a disk fault: writes are
    atomic; a link, a pipe or a huge file is never followed or read through); None once it is
    gone (its reader finished meanwhile)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, 0.0
    except OSError:  # a link (O_NOFOLLOW), or unreadable
        return {}, 0.0
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_LEASE_BYTES:
            return {}, 0.0
        with os.fdopen(handle, "rb", closefd=False) as stream:
            record, refreshed = json.loads(stream.read(MAX_LEASE_BYTES).decode("utf-8")), info.st_mtime
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}, 0.0
    finally:
        os.close(handle)
    paths = record.get("paths") if isinstance(record, dict) else None
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        return {}, 0.0
    return record, refreshed


def live_leases(root: Path) -> list[dict]:
    """The leases of running readers (what each reads, since when), oldest first."""
    return sorted((record for _, record, alive in _leases(root) if alive), key=lambda r: r.get("since", 0))


def older_readers(root: Path, current: Snapshot) -> list[tuple[dict, int]]:
    """The live leases that keep files the `current` snapshot no longer lists (what keeps an older
    version's files on disk), each with how many such files it keeps."""
    listed = {e.path for entries in current.tables.values() for e in entries}
    found = [(lease, len(set(lease["paths"]) - listed)) for lease in live_leases(root)]
    return [(lease, older) for lease, older in found if older]


def describe_lease(lease: dict) -> str:
    """"pid 123 on host h (odqa encode …) since 12:00:01 UTC: encode m" from a lease's record
    (its reader named as a writer lock names its holder)."""
    return f"{holder_text({**lease, 'started': lease.get('since', 0)})}: {lease.get('what')}"


class _Refresher:
    """Touches this process's lease files every `REFRESH_S` from one daemon thread, so readers on
    other hosts see them as live (on this host the pid tells)."""

    def __init__(self) -> None:
        self._held: set[Path] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=self._forget)  # a child holds none of its parent's leases

    def _forget(self) -> None:
        self._held, self._lock, self._thread = set(), threading.Lock(), None

    def add(self, path: Path) -> None:
        with self._lock:
            self._held.add(path)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="odqa-read-leases", daemon=True)
                self._thread.start()

    def discard(self, path: Path) -> None:
        with self._lock:
            self._held.discard(path)

    def _run(self) -> None:
        while True:
            time.sleep(REFRESH_S)
            with self._lock:
                held = list(self._held)
            for path in held:
                with contextlib.suppress(OSError):
                    os.utime(path)


_REFRESHER = _Refresher()


def _write_lease(root: Path, paths: Sequence[str], what: str) -> Path:
    host, pid = socket.gethostname(), os.getpid()
    path = leases_dir(root) / f"{slug(host)[:40]}-{pid}-{uuid.uuid4().hex[:8]}.json"
    record = {"host": host, "pid": pid, "started": process_start(pid), "since": time.time(),
              "command": this_command(), "what": what, "paths": sorted(set(paths))}  # fmt: skip
    atomic_write_json(path, record)
    _REFRESHER.add(path)
    return path


def _paths(snapshot: Snapshot, tables: Sequence[str] | None) -> list[str]:
    """The files of the snapshot's `tables` (None: of every table)."""
    return [e.path for t in (snapshot.tables if tables is None else tables) for e in snapshot.files(t)]


def _missing(root: Path, snapshot: Snapshot, tables: Sequence[str] | None) -> list[str]:
    return [path for path in _paths(snapshot, tables) if not (root / path).is_file()]


@contextlib.contextmanager
def _leased(root: Path, tables: Sequence[str] | None, what: str, choose: Callable[[], Snapshot]
            ) -> Iterator[Snapshot]:  # fmt: skip
    """The snapshot `choose` picks (under the lease lock), its `tables`' files (None: every
    table's) leased for the block."""
    lease: Path | None = None
    try:
        with leases_locked(root):
            snapshot = choose()
            lease = _write_lease(root, _paths(snapshot, tables), what)
    except OSError as exc:
        if exc.errno not in _NO_LEASE:
            raise
        snapshot = choose()
    try:
        yield snapshot
    finally:
        if lease is not None:
            _REFRESHER.discard(lease)
            lease.unlink(missing_ok=True)


def reading(root: Path, tables: Sequence[str] | None, what: str, snapshot: Snapshot | None = None
            ) -> contextlib.AbstractContextManager[Snapshot]:  # fmt: skip
    """The current snapshot (or `snapshot`), whose `tables`' files (None: every table's) stay on
    disk while the block runs. A given snapshot whose files are gone raises `TableVersionGone`."""

    def choose() -> Snapshot:
        if snapshot is None:
            return load_snapshot(root)  # the newest: no collection deletes its files
        gone = _missing(root, snapshot, tables)
        if gone:
            raise TableVersionGone(
                f"{len(gone)} file(s) of snapshot {snapshot.version} are gone from {root}, e.g. {gone[0]} (later "
                "commits replaced them, or they were deleted by hand); run it again to read the current tables"
            )  # fmt: skip
        return snapshot

    return _leased(root, tables, what, choose)


def reading_version(root: Path, table: str, version: str, what: str, also: Sequence[Snapshot] = ()
                    ) -> contextlib.AbstractContextManager[Snapshot]:  # fmt: skip
    """The newest snapshot in which `table` has `version` with its files still on disk (the
    current one, else a recent one, else one of `also`: the files a published release pins),
    those files kept while the block runs: a build keyed by a version reads exactly that
    version, whatever committed since. `TableVersionGone` when no snapshot still has it."""

    def choose() -> Snapshot:
        current = load_snapshot(root)
        for snapshot in (current, *reversed(recent_snapshots(root, HISTORY_KEEP)), *also):
            if snapshot.table_version(table) == version and not _missing(root, snapshot, [table]):
                return snapshot
        raise TableVersionGone(
            f"the {table} table's version {version} is no longer in {root} (it now has version "
            f"{current.table_version(table)}, and the files of {version} were deleted after later commits); "
            "run it again to build the current version"
        )  # fmt: skip

    return _leased(root, [table], what, choose)
