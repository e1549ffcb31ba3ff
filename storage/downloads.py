"""Where `odqa fetch` puts what it downloads, and what it remembers about it.

```
<workspace>/downloads/
  <host>/<path>              a published download: whole and verified (it appears by one rename)
  <host>/<path>.part         the bytes received so far; a later fetch resumes it with an HTTP Range
  <host>/<path>.part.json    where those bytes came from (URL, ETag, Last-Modified, expected size),
                             so a resume never splices two versions of a file together
  <host>/<path>.unpacked/    an archive's content, or a decompressed file (built aside, renamed in)
  seen-sha256.json           the sha256 (and size) each file had when first downloaded, for files
                             whose publisher gives no checksum: every later use is checked against it
<workspace>/locks/           one fetcher per file (`storage.locks`): a second one waits
```

A file's place mirrors its URL (`https://HOST/PATH` -> `downloads/HOST/PATH`), so two registry
entries naming one URL share one download, and no two URLs collide. A mirror (`--mirror`) does
not change the place: the file is the publisher's file, fetched through another address.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlsplit

from .atomic import atomic_write_json, naming_full_disk
from .locks import writer_lock

DOWNLOADS_DIR = "downloads"
SEEN_SHA256_FILE = "seen-sha256.json"
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~=-]*")
KEEP_FREE = 1 << 30  # bytes a download or an unpack leaves free on its file system (`atomic.ensure_room`)
_LOCK_WAIT_S = 7 * 24 * 3600.0  # a second fetcher of the same file waits for the first, however long it takes


@dataclass(frozen=True)
class DownloadSlot:
    """The paths of one download: the published file, its partial file and the partial's state."""

    key: str  # HOST/PATH, the file's identity in seen-sha256.json and in its lock's name
    final: Path
    part: Path
    state: Path
    unpacked: Path


def downloads_dir(root: Path) -> Path:
    return Path(root) / DOWNLOADS_DIR


def download_key(url: str) -> str:
    """`https://HOST/PATH` -> `HOST/PATH`, refused when a segment could leave the downloads folder
    or hide itself (`..`, a leading dot, a control character): a registry names files, not places."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r}: expected an http:// or https:// URL with a host")
    segments = [parts.hostname.lower(), *(unquote(s) for s in parts.path.split("/") if s)]
    bad = [s for s in segments if not _SEGMENT.fullmatch(s)]
    if bad or len(segments) < 2:
        raise ValueError(f"{url!r}: a download's URL must end in a file name made of letters, digits and ._+~=- "
                         f"(and no segment may start with a dot); refused: {bad or 'no file name'}")
    return "/".join(segments)


def download_slot(root: Path, url: str) -> DownloadSlot:
    """Where the file of `url` (the publisher's URL, not a mirror's) lives in the workspace."""
    key = download_key(url)
    final = downloads_dir(root) / key
    return DownloadSlot(key=key, final=final, part=final.with_name(final.name + ".part"),
                        state=final.with_name(final.name + ".part.json"),
                        unpacked=final.with_name(final.name + ".unpacked"))  # fmt: skip


@contextmanager
def download_lock(root: Path, slot: DownloadSlot) -> Iterator[None]:
    """One fetcher per file: a second process fetching the same file waits, then finds it published."""
    with writer_lock(Path(root), f"download:{slot.key}", f"the download {slot.key}", wait_s=_LOCK_WAIT_S):
        yield


def read_part_state(slot: DownloadSlot) -> dict[str, Any]:
    """What the partial file was fetched from; empty when there is none or it is unreadable (the
    partial file is then started again, never trusted)."""
    try:
        state = json.loads(slot.state.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def write_part_state(slot: DownloadSlot, state: dict[str, Any]) -> None:
    slot.part.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(slot.state, state)


def discard_part(slot: DownloadSlot) -> None:
    """Forget a partial download (a refused one, or one whose source changed)."""
    slot.part.unlink(missing_ok=True)
    slot.state.unlink(missing_ok=True)


class LinkedDownloadError(RuntimeError):
    """A symbolic link where a download's file goes: odqa writes and publishes only files it made."""


def refuse_links(slot: DownloadSlot) -> None:
    """Refuse a download whose partial or published file is a symbolic link: bytes appended to a
    link land in whatever it names, and a linked "published" file was never fetched or checked
    here. Checked before any request; `open_part` refuses one made meanwhile."""
    for path in (slot.part, slot.final, slot.state):
        if path.is_symlink():
            raise LinkedDownloadError(f"{path}: a symbolic link (to {os.readlink(path)}) where odqa keeps a download; "
                                      "it writes and publishes only files it made: remove the link and fetch again")  # fmt: skip


def open_part(slot: DownloadSlot, append: bool) -> BinaryIO:
    """The partial file, opened to append the next bytes (or truncated to start again); never
    through a symbolic link (`refuse_links`)."""
    slot.part.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        descriptor = os.open(slot.part, flags, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            refuse_links(slot)
        raise
    return os.fdopen(descriptor, "ab" if append else "wb")


def part_size(slot: DownloadSlot) -> int:
    try:
        return slot.part.stat().st_size
    except FileNotFoundError:
        return 0


def publish(slot: DownloadSlot) -> Path:
    """Give the whole, verified partial file its final name, with one rename (after an fsync), so
    the final name only ever names a whole, verified file."""
    with naming_full_disk(slot.final), open(slot.part, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(slot.part, slot.final)
    slot.state.unlink(missing_ok=True)
    return slot.final


def _seen_path(root: Path) -> Path:
    return downloads_dir(root) / SEEN_SHA256_FILE


def _read_seen(root: Path) -> dict[str, dict[str, Any]]:
    path = _seen_path(root)
    if not path.exists():
        return {}
    try:
        seen = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}); it records the sha256 of each download whose "
                         "publisher gives no checksum. Restore it, or delete it to record them anew") from exc
    if not isinstance(seen, dict):
        raise ValueError(f"{path}: expected a JSON object of download -> {{sha256, bytes}}")
    return seen


def seen_sha256(root: Path, slot: DownloadSlot) -> dict[str, Any] | None:
    """The {sha256, bytes, url} recorded at this file's first download, if any."""
    return _read_seen(root).get(slot.key)


def record_sha256(root: Path, slot: DownloadSlot, sha256: str, size: int, url: str) -> None:
    """Remember the sha256 a file had at its first download (one writer of the record at a time)."""
    with writer_lock(Path(root), "downloads:seen-sha256", "the record of downloads' sha256", wait_s=60.0):
        seen = _read_seen(root)
        seen[slot.key] = {"sha256": sha256, "bytes": size, "url": url}
        atomic_write_json(_seen_path(root), seen)


def recorded_sizes(root: Path) -> dict[str, int]:
    """The size each downloaded file had, by its key (for `odqa fetch --list` where the registry has none)."""
    try:
        seen = _read_seen(root)
    except ValueError:
        return {}
    return {key: int(entry["bytes"]) for key, entry in seen.items() if isinstance(entry, dict) and "bytes" in entry}
