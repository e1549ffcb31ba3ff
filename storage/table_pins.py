"""Table files kept for a holder outside the snapshot history: a published release's passages.

A commit deletes the table files no recent snapshot lists (`tables._collect_garbage`). A release
keeps serving the passages its indexes were built from long after ingests have replaced them
(a re-index withheld, or still encoding), and a service that starts then must show those
passages' texts, not the newer ones under the same ids. So publishing a release pins its passages
files here, by release id, and the garbage collection keeps every pinned file; pruning the
release unpins them, and the next commit deletes them.

    tables/pins.json   {holder: [file path relative to the workspace root, ...]}

The record is replaced whole (`set_pins`) under the workspace lock, the lock every commit's
collection runs under, so no collection sees a half-updated set.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from .atomic import atomic_write_json
from .snapshot import FileEntry
from .table_files import TABLES_DIR

PINS_FILE = "pins.json"


def pins_path(root: Path) -> Path:
    return root / TABLES_DIR / PINS_FILE


def read_pins(root: Path) -> dict[str, list[str]]:
    """holder -> the files pinned for it (empty when nothing is pinned)."""
    try:
        data = json.loads(pins_path(root).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as exc:  # writes are atomic: only a hand edit gets here
        raise RuntimeError(f"{pins_path(root)} is not valid JSON ({exc}); delete it and publish again "
                           "(odqa reindex): it lists the table files published releases still use") from exc  # fmt: skip
    return {str(holder): [str(p) for p in paths] for holder, paths in data.items()}


def pinned_paths(root: Path) -> set[str]:
    """Every pinned file (what the garbage collection keeps)."""
    return {path for paths in read_pins(root).values() for path in paths}


def missing_files(root: Path, entries: Sequence[FileEntry]) -> list[str]:
    """The paths of `entries` no longer on disk (deleted by hand, or before they were pinned)."""
    return [entry.path for entry in entries if not (root / entry.path).is_file()]


def set_pins(root: Path, pins: dict[str, list[str]]) -> None:
    """Replace the whole pin record; call under `snapshot.workspace_lock`."""
    atomic_write_json(pins_path(root), {holder: sorted(paths) for holder, paths in sorted(pins.items())})
