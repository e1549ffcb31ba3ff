"""The modes odqa's processes create files with: owner-only unless the user says otherwise.

A workspace holds what its user imported (passages, questions, models) and logs that may quote
them; on a shared machine a 0644 log or table is readable by every user. So every odqa process
(the CLI, `./run server`, its worker and flow runs, the Prefect server odqa starts, its watchdog,
`odqa serve`) sets the umask ``$ODQA_UMASK`` (octal, default 077: files 0600, folders 0700)
before it writes anything; child processes inherit it. ``ODQA_UMASK=022`` gives the usual
0644/0755. The umask holds for everything the process writes, exports (`--out`) included: what an
export holds came from the workspace, so it is as private by default.

Logs are created with at most the mode ``$ODQA_UMASK`` leaves even by a process that keeps
another umask (a Python caller that starts a workspace's server), and a log an older odqa created
0644 is tightened when it is opened for appending (`tighten`): only the bits ``$ODQA_UMASK``
removes are taken away, never added. The Python API (`odqa.open_workspace`) leaves its caller's
umask alone: a notebook's process is not odqa's to change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

UMASK_ENV = "ODQA_UMASK"
DEFAULT_UMASK = 0o077


def wanted_umask() -> int:
    """``$ODQA_UMASK`` (octal, 000-777), else 077; a clear error for anything else."""
    value = os.environ.get(UMASK_ENV, "").strip()
    if not value:
        return DEFAULT_UMASK
    try:
        mask = int(value, 8)
    except ValueError:
        mask = -1
    if not 0 <= mask <= 0o777:
        raise ValueError(f"{UMASK_ENV}={value!r}: expected an octal umask such as 077 (owner only, the default) "
                         "or 022 (readable by everyone)")  # fmt: skip
    return mask


def apply_umask() -> int:
    """Set this process's umask to `wanted_umask`; returns the one it replaced."""
    return os.umask(wanted_umask())


def current_umask() -> int:
    """This process's umask: from /proc (Linux), else by setting it and setting it back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _setting_or_current() -> int:
    try:
        return wanted_umask()
    except ValueError:  # reported by the process's own `apply_umask`; a log is no place to fail
        return current_umask()


def tighten(path: Path | str) -> None:
    """Take from ``path`` the permission bits ``$ODQA_UMASK`` removes (a log an older odqa
    created 0644 becomes 0600 by default); nothing when it has none of them, or is not ours."""
    mask = _setting_or_current()
    try:
        mode = os.stat(path).st_mode & 0o777
        if mode & mask:
            os.chmod(path, mode & ~mask)
    except OSError:
        pass


def append_log(path: Path) -> BinaryIO:
    """``path`` opened for appending: a log, created with at most the mode ``$ODQA_UMASK`` leaves
    whatever the umask of the process opening it (a Python caller starting a server), and
    tightened when an older odqa made it wider. Its folder must exist: a log never creates the
    workspace it lives in."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666 & ~_setting_or_current())
    tighten(path)
    return os.fdopen(descriptor, "ab")
