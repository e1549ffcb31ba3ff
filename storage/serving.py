"""Running search services, registered in the workspace so that a publish knows what they serve.

`odqa serve` registers itself for as long as it runs:

    indexes/serving/<host>-<pid>.lock   an `flock` the service holds until it exits
    indexes/serving/<host>-<pid>.json   what it serves: address, default retriever, `--model`,
                                        the release it has loaded, BM25 or not, the dense model

`storage.releases.publish` reads the live records and never publishes a release that lacks a
retriever one of them answers with. The kernel frees a process's `flock` when it dies, so a
record whose lock is free belongs to a service that is gone, however it ended: `live_services`
ignores it and deletes it. (An `flock` is per machine, as the writer locks': a service on another
host of a shared file system is only seen when that file system passes `flock` on.)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .atomic import atomic_write_json, slug
from .locks import this_command
from .workspace import Workspace

SERVING_DIR = "serving"


@dataclass(frozen=True)
class ServiceRecord:
    """One running `odqa serve`, as it registered itself."""

    pid: int
    host: str
    address: str | None  # where it listens (http://host:port), when known
    retriever: str  # the retriever of requests that name none (`--retriever`)
    model: str | None  # `--model` as given; None: it follows the release's default model
    release: str | None = None  # the release it has loaded (None: none yet)
    bm25: bool = False  # it answers BM25 (and hybrid) requests from that release
    dense_model: str | None = None  # the release's dense model it encodes questions for (None: no dense)
    command: str = ""
    started_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def describe(self) -> str:
        """`odqa serve pid 4711 on host gpu1 at http://127.0.0.1:8000 (--retriever hybrid)`: whom a refusal names."""
        at = f" at {self.address}" if self.address else ""
        model = f" --model {self.model}" if self.model else ""
        return f"odqa serve pid {self.pid} on host {self.host}{at} (--retriever {self.retriever}{model})"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServiceRecord:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)


def serving_dir(ws: Workspace) -> Path:
    return ws.indexes_dir / SERVING_DIR


def _stem(host: str, pid: int) -> str:
    return f"{slug(host, 'host')}-{pid}"


class ServiceRegistration:
    """A service's record in the workspace, held (`flock`) while the service runs.

    `register()` (or entering a `with` block) writes it, `update(...)` rewrites it (the service
    loaded another release), `unregister()` (or leaving the block) removes it. Only `register`
    creates the folder: a workspace deleted while the service runs is not re-created.
    """

    def __init__(self, ws: Workspace, record: ServiceRecord) -> None:
        self.ws = ws
        self.record = record
        stem = _stem(record.host, record.pid)
        self.lock_path = serving_dir(ws) / f"{stem}.lock"
        self.path = serving_dir(ws) / f"{stem}.json"
        self._handle: Any = None

    def register(self) -> None:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            handle = open(self.lock_path, "a+", encoding="utf-8")  # noqa: SIM115 (held until __exit__)
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            # A reader that found an older, dead holder's lock free may have deleted the file
            # between our open and our lock: then the lock we hold is on no name; take it again.
            with contextlib.suppress(FileNotFoundError):
                if os.fstat(handle.fileno()).st_ino == os.stat(self.lock_path).st_ino:
                    break
            handle.close()
        self._handle = handle
        atomic_write_json(self.path, asdict(self.record))

    def update(self, **changes: Any) -> None:
        """Record what the service serves now (its folder gone: the workspace was deleted, nothing is written)."""
        self.record = replace(self.record, **changes)
        if self._handle is not None and self.path.parent.is_dir():
            atomic_write_json(self.path, asdict(self.record))

    def unregister(self) -> None:
        if self._handle is None:
            return
        self.path.unlink(missing_ok=True)
        self.lock_path.unlink(missing_ok=True)
        self._handle.close()  # frees the flock
        self._handle = None

    def __enter__(self) -> ServiceRegistration:
        self.register()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unregister()


def this_service(address: str | None, retriever: str, model: str | None) -> ServiceRecord:
    """The record of the calling process, before it has loaded a release."""
    return ServiceRecord(pid=os.getpid(), host=socket.gethostname(), address=address, retriever=retriever,
                         model=model, command=this_command())  # fmt: skip


def live_services(ws: Workspace) -> list[ServiceRecord]:
    """The services registered in the workspace that still run; the records of those that do not
    are deleted on the way."""
    folder = serving_dir(ws)
    if not folder.is_dir():
        return []
    live = []
    for path in sorted(folder.glob("*.json")):
        record = _live_record(path, path.with_suffix(".lock"))
        if record is not None:
            live.append(record)
    return live


def _live_record(path: Path, lock: Path) -> ServiceRecord | None:
    """The record at `path` while its service holds `lock`; else None, and the record is deleted."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        path.unlink(missing_ok=True)  # the service removed its lock on the way out
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held: the service runs
            try:
                return ServiceRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
            except FileNotFoundError:
                return None  # it just stopped
        path.unlink(missing_ok=True)  # free: its process is gone
        lock.unlink(missing_ok=True)
        return None
    finally:
        os.close(fd)
