"""One writer per thing: named writer locks under `<workspace>/locks/` that say who holds them.

A command that writes a table from a source, a model id or a resumable stage takes the thing's
lock for as long as it writes. The lock is an `flock` on `locks/<name>.lock`, so the kernel frees
it the moment its owner dies (a dead owner's lock is reclaimed at once, with no stale-file
guessing); the file holds the owner's pid, host and command, so a second writer is refused with a
message that names the holder. Lock files are never deleted, which keeps the flock race-free.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .atomic import slug

LOCKS_DIR = "locks"


class WriterBusy(RuntimeError):
    """Another live process writes the same thing; the message names it."""


def holder_text(info: dict) -> str:
    """"pid 123 on host h (odqa train ...) since 12:00:01 UTC" from a lock file's record."""
    if not info:
        return "another process (it is just starting)"
    since = time.strftime("%H:%M:%S UTC", time.gmtime(info.get("started", 0)))
    return f"pid {info.get('pid')} on host {info.get('host')} ({info.get('command')}) since {since}"


def _read_holder(handle) -> dict:
    handle.seek(0)
    try:
        return json.loads(handle.read() or "{}")
    except json.JSONDecodeError:
        return {}


def this_command() -> str:
    """The running command line, shortened, as a lock names its holder."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] not in ("", "-c") else "python"
    words = [program, *sys.argv[1:]]
    text = " ".join(words)
    return text if len(text) <= 200 else text[:199] + "…"


@contextmanager
def writer_lock(root: Path, name: str, what: str, wait_s: float = 0.0) -> Iterator[None]:
    """Hold the writer lock `name` of the workspace at `root`, or raise `WriterBusy` naming its holder.

    `what` says what the lock protects ("passages from /data/a.tsv"). With `wait_s` > 0 the caller
    waits that long (saying once, on stderr, what it waits for) before giving up.
    """
    folder = root / LOCKS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{slug(name)[:80]}-{hashlib.sha1(name.encode()).hexdigest()[:10]}.lock"
    with open(path, "a+", encoding="utf-8") as handle:
        deadline = time.monotonic() + wait_s
        announced = False
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = holder_text(_read_holder(handle))
                if time.monotonic() >= deadline:
                    raise WriterBusy(
                        f"{what} is being written by {holder}; wait for it to finish, or stop it "
                        f"(lock {path})"
                    ) from None
                if not announced:
                    print(f"waiting for {holder}, which writes {what}", file=sys.stderr, flush=True)
                    announced = True
                time.sleep(0.2)
        try:
            record = {"pid": os.getpid(), "host": socket.gethostname(), "command": this_command(), "started": time.time()}
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(record))
            handle.flush()
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
