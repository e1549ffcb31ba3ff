"""The workspace snapshot: which Parquet files make up each table, and which stages are done.

A single JSON file (`snapshot.json`) lists every table's files. Writers stage new files, then
switch the snapshot with one atomic rename under a lock, so a reader sees either the old or the
new state of *all* tables a stage wrote, and a killed stage leaves only unreferenced files
behind (collected later). The stage ledger in the same file makes a re-run with an unchanged
fingerprint a no-op, and records each stage's report.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .atomic import atomic_write_text

SNAPSHOT_FILE = "snapshot.json"
HISTORY_DIR = "snapshots"
LOCK_FILE = ".lock"
HISTORY_KEEP = 10  # snapshot versions kept in HISTORY_DIR (a publish looks there for its passages' files)


@dataclass(frozen=True)
class FileEntry:
    """One Parquet part of a table; `path` is relative to the workspace root."""

    path: str
    source: str
    rows: int


@dataclass(frozen=True)
class StageRecord:
    """What a finished stage consumed (fingerprint) and reported."""

    fingerprint: str
    version: int
    finished_at: float
    report: dict[str, Any] = field(default_factory=dict)


@dataclass
class Snapshot:
    version: int = 0
    tables: dict[str, list[FileEntry]] = field(default_factory=dict)
    stages: dict[str, StageRecord] = field(default_factory=dict)

    def files(self, table: str) -> list[FileEntry]:
        return list(self.tables.get(table, []))

    def rows(self, table: str) -> int:
        return sum(entry.rows for entry in self.tables.get(table, []))

    def table_version(self, table: str) -> str:
        """An id of a table's content: changes exactly when its file list changes.

        Indexes and embeddings record it so a stale one is detected without hashing data.
        """
        from .fingerprint import fingerprint

        return fingerprint(table, [entry.path for entry in self.tables.get(table, [])])[:16]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "tables": {name: [asdict(e) for e in entries] for name, entries in self.tables.items()},
            "stages": {name: asdict(record) for name, record in self.stages.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        return cls(
            version=int(data.get("version", 0)),
            tables={
                name: [FileEntry(**entry) for entry in entries]
                for name, entries in data.get("tables", {}).items()
            },
            stages={name: StageRecord(**record) for name, record in data.get("stages", {}).items()},
        )


def load_snapshot(root: Path) -> Snapshot:
    """The current snapshot; an empty one for a new workspace."""
    path = root / SNAPSHOT_FILE
    try:
        with open(path, encoding="utf-8") as handle:
            return Snapshot.from_json(json.load(handle))
    except FileNotFoundError:
        return Snapshot()
    except json.JSONDecodeError as exc:  # only a hand-edited file can get here: writes are atomic
        raise RuntimeError(f"{path} is not valid JSON ({exc}); restore it from {root / HISTORY_DIR}") from exc


def save_snapshot(root: Path, snapshot: Snapshot) -> None:
    """Persist a new snapshot version (history copy first, then the atomic switch)."""
    text = json.dumps(snapshot.to_json(), indent=1, sort_keys=True)
    history = root / HISTORY_DIR
    history.mkdir(parents=True, exist_ok=True)
    atomic_write_text(history / f"{snapshot.version:08d}.json", text)
    atomic_write_text(root / SNAPSHOT_FILE, text)


def recent_snapshots(root: Path, keep: int) -> list[Snapshot]:
    """The last `keep` snapshot versions (readers may still be using files of these)."""
    history = root / HISTORY_DIR
    if not history.exists():
        return []
    names = sorted(p.name for p in history.glob("*.json"))[-keep:]
    return [Snapshot.from_json(json.loads((history / n).read_text(encoding="utf-8"))) for n in names]


def prune_history(root: Path, keep: int) -> None:
    history = root / HISTORY_DIR
    for path in sorted(history.glob("*.json"))[:-keep]:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def workspace_lock(root: Path, timeout_s: float = 600.0) -> Iterator[None]:
    """Exclusive lock for read-modify-write of the snapshot (several processes may commit)."""
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_file_lock(root / LOCK_FILE, timeout_s, f"workspace {root}"):
        yield


@contextlib.contextmanager
def exclusive_file_lock(path: Path, timeout_s: float, what: str) -> Iterator[None]:
    """An `flock` on `path` (created if needed), polled until `timeout_s`; the kernel frees it
    when its holder dies. A TimeoutError names `what` stayed locked."""
    with open(path, "a+") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{what} stayed locked for {timeout_s:.0f}s") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
