"""What makes a folder an odqa workspace: a marker file odqa writes, and nothing else.

`--workspace DIR` is typed by hand, so a typo or a wrong folder (the home folder, a data folder)
must not become a workspace by being named: reading verbs would otherwise create `catalog.duckdb`
and `tables/` in it, and writing verbs would scatter tables, indexes and logs among the user's
files. A workspace is a folder that holds `.odqa-workspace`, written by `odqa init` or by the
first writing verb in a new or empty folder. Workspaces made before the marker existed hold
odqa's `snapshot.json` (the tables and stage ledger): they are recognised by it and get the
marker the next time a verb opens them.

* `require_workspace(root)`: readers. The folder must be a workspace; nothing is created.
* `claim_workspace(root)`: writers. A workspace, or a new or empty folder (created and marked);
  any other folder is refused unless `odqa init` marks it (`mark_workspace(root)`).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from .snapshot import SNAPSHOT_FILE

MARKER_FILE = ".odqa-workspace"
INIT_HINT = "`odqa init DIR` makes a folder a workspace"


class NotAWorkspaceError(FileNotFoundError):
    """A folder that odqa did not make a workspace: refused by readers (always) and by writers
    (when it already holds something)."""


def workspace_root(path: str | os.PathLike[str]) -> Path:
    """The absolute folder `path` names (`~` expanded), refused when it is a file."""
    root = Path(path).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"workspace {root} exists and is not a directory")
    return root


def is_workspace(root: Path) -> bool:
    """True when `root` holds odqa's marker, or the snapshot of a workspace made before it."""
    return (root / MARKER_FILE).is_file() or (root / SNAPSHOT_FILE).is_file()


def mark_workspace(root: Path) -> None:
    """Make `root` (created when missing) a workspace; a no-op when it is one already.

    The marker is created in place with O_EXCL, not renamed into place: its presence is all it
    says, and a temporary file beside it would make a second verb starting on the same new folder
    see a folder that is neither empty nor a workspace, and refuse it."""
    if (root / MARKER_FILE).is_file():
        return
    root.mkdir(parents=True, exist_ok=True)
    marker = {"odqa": "workspace", "marked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        handle = os.open(root / MARKER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:  # another verb marked it meanwhile
        return
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(json.dumps(marker) + "\n")


def require_workspace(root: Path) -> None:
    """Refuse `root` unless it is a workspace (readers: nothing is created, nothing is marked
    but a workspace made before the marker)."""
    if not root.is_dir():
        raise NotAWorkspaceError(f"no odqa workspace at {root} (no such folder): create one with a verb that "
                                 f"brings data in (odqa import passages, odqa ingest, odqa demo), or {INIT_HINT}")  # fmt: skip
    if not is_workspace(root):
        raise NotAWorkspaceError(f"no odqa workspace at {root}: the folder exists but odqa did not make it a "
                                 f"workspace (it has no {MARKER_FILE}); check --workspace / $ODQA_WORKSPACE, "
                                 f"or {INIT_HINT}")  # fmt: skip
    with contextlib.suppress(OSError):  # a workspace made before the marker gets it, where writable
        mark_workspace(root)


def claim_workspace(root: Path) -> None:
    """Open `root` for writing: a workspace, or a new or empty folder, which becomes one.

    A folder that already holds files odqa did not make is refused, so that `-w ~` never
    scatters tables among them; `odqa init DIR` marks such a folder when that is what is wanted."""
    if root.is_dir() and not is_workspace(root) and any(root.iterdir()):
        raise NotAWorkspaceError(f"{root} is not an odqa workspace and is not empty: odqa does not write its tables, "
                                 f"indexes and logs among other files; pick a new or empty folder (--workspace / "
                                 f"$ODQA_WORKSPACE), or {INIT_HINT} anyway")  # fmt: skip
    mark_workspace(root)
