"""Files and folders the user names for odqa to write (`odqa export ... --out`, `retrieve --trec`):
a write never destroys what odqa did not make.

The rule, checked before any work starts and again just before the new content is put in place:

- **Never the workspace.** A target that is a workspace, an ancestor of one, or inside a part
  of it that odqa owns (`WORKSPACE_ENTRIES`: tables, indexes, models, ...) is refused, even
  with `--force`. A folder of the user's own inside the workspace (`<ws>/exports`) is allowed.
  The workspace is the one the command runs on, and any folder above the target that holds a
  `snapshot.json` (another workspace).
- **A folder** that does not exist or is empty is written. One that holds anything is refused
  unless `--force`; `--force` replaces only an earlier odqa export of the same kind (it holds
  `EXPORT_MARKER`, which every exported folder gets), and still refuses a folder odqa did not
  write. The new folder is built beside the old one and swapped in by renames
  (`atomic.building_directory`): the old content is deleted only once the new one is complete.
- **A file** that does not exist is written; an existing one is replaced only with `--force`.
  The new file is written beside it and renamed over it; without `--force` it is linked into
  place, which fails rather than overwrite a file that appeared meanwhile.

Symbolic links in the target are followed first, so a link to the workspace is the workspace.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from .atomic import (
    atomic_write_json,
    building_directory,
    naming_full_disk,
    reclaim_stale_siblings,
    recover_replaced,
    stale_sibling_name,
)
from .catalog import CATALOG_FILE
from .ingest_state import INGEST_DIR
from .locks import LOCKS_DIR
from .snapshot import HISTORY_DIR, SNAPSHOT_FILE
from .table_files import TABLES_DIR
from .tables import STAGING_DIR

EXPORT_MARKER = ".odqa-export.json"
WRITING = "writing"  # the kind of an export file's staged sibling (`atomic.stale_sibling_name`)

# Everything odqa keeps at a workspace's top level: storage's files and folders (`Workspace`'s
# folders by name), and the command line's logs, the Prefect server's state and the watched
# folder, whose names tests/boundaries checks against the modules that make them. Hidden entries
# (`.lock`, temporary siblings) are odqa's too.
WORKSPACE_ENTRIES = frozenset({
    SNAPSHOT_FILE, HISTORY_DIR, TABLES_DIR, STAGING_DIR, CATALOG_FILE, f"{CATALOG_FILE}.wal", LOCKS_DIR, INGEST_DIR,
    "indexes", "models", "plots", "tmp", "pipeline-cache", "logs", "prefect", "incoming",
})  # fmt: skip


class WriteRefused(ValueError):
    """The target would destroy or mix into something odqa did not make; the message says what."""


def _owned_part(target: Path, root: Path) -> str | None:
    """Why `target` (resolved) is part of the workspace at `root` (resolved), or None."""
    if target == root:
        return f"is the workspace {root}"
    if target in root.parents:
        return f"is a folder above the workspace {root}"
    if root in target.parents:
        entry = target.relative_to(root).parts[0]
        if entry in WORKSPACE_ENTRIES or entry.startswith("."):
            return f"is {'' if target.name == entry else 'inside '}the workspace's own {entry!r} ({root / entry})"
    return None


def _workspace_problem(target: Path, workspace: Path) -> str | None:
    """Why writing `target` would touch the command's workspace or another one, or None."""
    problem = _owned_part(target, workspace)
    if problem:
        return problem
    if (target / SNAPSHOT_FILE).is_file():
        return f"is an odqa workspace (it holds {SNAPSHOT_FILE})"
    for folder in target.parents:
        if (folder / SNAPSHOT_FILE).is_file() and (problem := _owned_part(target, folder)):
            return problem
    return None


def _earlier_export(folder: Path, kind: str) -> bool:
    """Whether `folder` is an export odqa wrote of this kind (its marker says so)."""
    try:
        return json.loads((folder / EXPORT_MARKER).read_text(encoding="utf-8")).get("kind") == kind
    except (OSError, ValueError, AttributeError):
        return False


def _listing(folder: Path) -> str:
    names = sorted(p.name for p in folder.iterdir())
    shown = ", ".join(repr(n) for n in names[:3])
    return f"{len(names):,} entries: {shown}{', ...' if len(names) > 3 else ''}"


def check_folder_target(out: str | os.PathLike[str], workspace: Path, *, option: str, kind: str,
                        force: bool) -> Path:  # fmt: skip
    """The folder an export of `kind` may write at `out` (resolved), or `WriteRefused` naming
    `option`, the folder and the rule (see the module doc)."""
    target = Path(out).expanduser().resolve()
    problem = _workspace_problem(target, workspace.resolve())
    if problem:
        raise WriteRefused(f"{option} {target} {problem}; odqa never writes an export there, not even with --force: "
                           "choose a folder outside the workspace's own folders")  # fmt: skip
    if target.exists() and not target.is_dir():
        raise WriteRefused(f"{option} {target} is a file, not a folder; choose a folder (new or empty)")
    if target.is_dir() and any(target.iterdir()):
        if not force:
            raise WriteRefused(f"{option} {target} exists and is not empty ({_listing(target)}); pass --force to "
                               f"replace an earlier export, or choose a new or empty folder")  # fmt: skip
        if not _earlier_export(target, kind):
            raise WriteRefused(f"{option} {target} is not an earlier odqa export of a {kind} (it has no {EXPORT_MARKER} "
                               f"saying so; {_listing(target)}); --force replaces only odqa's own exports: "
                               "empty it yourself, or choose a new folder")  # fmt: skip
    return target


def check_file_target(out: str | os.PathLike[str], workspace: Path, *, option: str, force: bool) -> Path:
    """The file odqa may write at `out` (resolved), or `WriteRefused` naming `option`, the file
    and the rule (see the module doc)."""
    target = Path(out).expanduser().resolve()
    problem = _workspace_problem(target, workspace.resolve())
    if problem:
        raise WriteRefused(f"{option} {target} {problem}; odqa never writes a file the user names there, not even "
                           "with --force: choose a path outside the workspace's own folders")  # fmt: skip
    if target.is_dir():
        raise WriteRefused(f"{option} {target} is a folder; name the file to write")
    if target.exists() and not force:
        raise WriteRefused(f"{option} {target} exists; pass --force to replace it, or choose another file name")
    return target


@contextlib.contextmanager
def export_folder(out: str | os.PathLike[str], workspace: Path, *, option: str, kind: str, force: bool,
                  about: dict[str, str] | None = None) -> Iterator[Path]:  # fmt: skip
    """An empty folder to write an export of `kind` in; when the block succeeds it gets the
    export marker (with `about`) and replaces `out` (checked by `check_folder_target` before and
    again at the swap); when it fails, `out` is left as it was."""
    recover_replaced(Path(out).expanduser().resolve())  # a killed swap's earlier export comes back first
    target = check_folder_target(out, workspace, option=option, kind=kind, force=force)
    with building_directory(target) as staging:
        yield staging
        marker = {"kind": kind, "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), **(about or {})}
        atomic_write_json(staging / EXPORT_MARKER, marker)
        check_folder_target(target, workspace, option=option, kind=kind, force=force)


@contextlib.contextmanager
def export_file(out: str | os.PathLike[str], workspace: Path, *, option: str, force: bool) -> Iterator[Path]:
    """A path beside `out` to write the file at; when the block succeeds the file is put at `out`
    (replacing an existing one only with `force`; checked by `check_file_target` before and at
    the end); when it fails, nothing is left. The staged file is named after its writer's pid, so
    what a killed export left (a hidden partial copy, as big as the file) is deleted by the next
    export to the same path."""
    target = check_file_target(out, workspace, option=option, force=force)
    if target.parent.is_dir():
        reclaim_stale_siblings(target, WRITING)  # a killed export's partial copy: as big as the file
    staged = stale_sibling_name(target, WRITING)
    try:
        with naming_full_disk(target):
            yield staged
            check_file_target(target, workspace, option=option, force=force)
            if force:
                os.replace(staged, target)
            else:
                _link_without_replacing(staged, target, option)
    finally:
        staged.unlink(missing_ok=True)


def _link_without_replacing(staged: Path, target: Path, option: str) -> None:
    """Put `staged` at `target` unless something is there (a file that appeared since the check)."""
    try:
        os.link(staged, target)
    except FileExistsError:
        raise WriteRefused(f"{option} {target} appeared while it was written; pass --force to replace it") from None
    except OSError:  # a file system without hard links: check, then rename
        if target.exists():
            raise WriteRefused(f"{option} {target} appeared while it was written; pass --force to replace it") from None
        os.replace(staged, target)
