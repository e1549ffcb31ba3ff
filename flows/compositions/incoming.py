"""What a scheduled re-index watches: a dump, a passages file, or a folder where new files land.

The weekly `reindex` deployment has no dump or passages of its own to ingest; it looks at its
`watch` source on every run (by default `<workspace>/incoming/`) and takes what is complete
there. In a folder, files are told apart by name:

* ``*.xml`` / ``*.xml.bz2``: a MediaWiki dump. A dump is a whole snapshot of the wiki, so only
  the newest one (by modification time, then name) is taken; the older ones are ignored. The
  ingest diffs it page by page against the previous one.
* ``*.tsv``: passages in DPR TSV (id, text, title); ``*.jsonl`` or a sub-folder holding
  ``corpus.jsonl``: a BEIR corpus.

An entry is taken only when it is complete and inside the folder (docs/boundaries.md, "The watch
folder"): temporary names (``*.part``, ``*.tmp``, ``*.partial``, ``*.crdownload``, dot-files,
``~`` backups) and files changed within the settle time wait for a later run; symbolic links,
hard links, anything that is not a regular file or folder, and a BEIR folder whose corpus.jsonl
is any of these are refused, named by their own name only (never followed, never opened). Every
check uses `lstat`, and a taken file is opened without following a link and checked to be the
very file that was looked at (`open_taken`), so a file swapped for a link in between is refused.
A file found malformed is set aside into ``rejected/`` (`set_aside`), so later runs go on.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

DUMP_SUFFIXES = (".xml", ".xml.bz2")
PASSAGE_FORMATS = {".tsv": "dpr-tsv", ".jsonl": "beir"}
#: Names a writer uses while a file is incomplete (browsers, rsync, curl -o x.part, editors).
TEMPORARY_SUFFIXES = (".part", ".partial", ".tmp", ".temp", ".crdownload", ".download", ".swp")
INCOMING = "incoming"
REJECTED = "rejected"
BEIR_CORPUS = "corpus.jsonl"
#: How long a file must be left unchanged before a run takes it (a writer that pauses longer
#: must write under a temporary name and rename).
SETTLE_SECONDS = 60.0
ODD_NAME = ("a name that is not UTF-8 or holds a control character (shown escaped): it cannot be named in logs and "
            "tables as it is; rename it")  # fmt: skip


class NotTaken(Exception):
    """A taken file that must not be read after all (a link swapped in, changed, gone); the message
    says why and is content-free."""

    def __init__(self, why: str, *, refused: bool = False) -> None:
        super().__init__(why)
        self.why, self.refused = why, refused


@dataclass(frozen=True)
class Taken:
    """A complete file the run reads: `path` is the entry in the folder (a file, or a BEIR
    folder), `data` the file read, `looked` what `lstat` said of `data` when it was looked at."""

    path: Path
    data: Path
    kind: str  # "dump" or "passages"
    fmt: str | None
    looked: os.stat_result
    given: bool = False  # named to the run (`--dump`, `--passages`): links in its path are followed

    def unchanged(self, now: os.stat_result) -> bool:
        """Whether `now` (a later stat) is still the same file with the same size and mtime."""
        return (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == (
            self.looked.st_dev, self.looked.st_ino, self.looked.st_size, self.looked.st_mtime_ns)  # fmt: skip


@dataclass
class Incoming:
    """What a watched source holds: the files a run takes, and every other entry with why not."""

    source: Path
    folder: bool  # a folder (malformed files are set aside in it), not a single watched file
    dump: Taken | None = None
    passages: list[Taken] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)  # name -> why it waits for a later run
    refused: dict[str, str] = field(default_factory=dict)  # name -> why it is never taken as it is
    ignored: dict[str, str] = field(default_factory=dict)  # name -> why it is no input of a re-index

    def describe(self) -> str:
        """One line for the run's log: where it looked and what it found there."""
        found = ([f"dump {self.dump.path.name}"] if self.dump else []) + [
            f"passages {taken.path.name} ({taken.fmt})" for taken in self.passages]  # fmt: skip
        others = "".join(f"; {title}: {', '.join(f'{name} ({why})' for name, why in entries.items())}"
                         for title, entries in (("left for later", self.left), ("refused", self.refused),
                                                ("ignored", self.ignored)) if entries)  # fmt: skip
        return f"looked at {self.source}: {', '.join(found) or 'no dump or passages file'}{others}"


def default_source(workspace_root: Path) -> Path:
    """The folder a re-index watches when no source is given: `<workspace>/incoming`."""
    return workspace_root / INCOMING


def _temporary(name: str) -> str | None:
    """Why a name says the file is not complete (or not meant to be taken), else None."""
    lowered = name.lower()
    if lowered.startswith("."):
        return "a hidden or temporary name: rename it when complete"
    if lowered.startswith("~") or lowered.endswith("~"):
        return "an editor's backup or lock name"
    if lowered.endswith(TEMPORARY_SUFFIXES):
        return "a temporary name: still being written, rename it when complete"
    return None


def _odd_name(name: str) -> str | None:
    """The name as messages show it (escaped), when it is one that no message, log line or table
    may carry as it is, else None: bytes that are not UTF-8 (Python holds them as surrogates,
    which every UTF-8 log handler, the Prefect API and Parquet refuse, so the whole run failed on
    them), or a control character such as a newline (it would start a forged line in the log)."""
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    shown = "".join(repr(c)[1:-1] if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text)
    return shown if shown != name else None


def _not_plain(mode: int) -> str | None:
    """Why an entry of this `lstat` mode is refused, else None (a regular file or a folder)."""
    if stat.S_ISLNK(mode):
        return "a symbolic link: only files inside the folder are taken, links are never followed"
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "not a regular file (a fifo, socket or device)"
    return None


def _unsettled(looked: os.stat_result, settle_seconds: float, now: float) -> str | None:
    """Why a file changed too recently to be taken, else None."""
    age = now - looked.st_mtime
    if age < -1.0:  # (beyond a file system's time granularity)
        return (f"its modification time is {-age:,.0f} s in the future (a clock ahead, or a time the copy set): "
                f"taken {settle_seconds:g} s after that time; touch it to take it once settled from now")  # fmt: skip
    if age < settle_seconds:
        return f"changed {max(age, 0):.0f} s ago, within the settle time of {settle_seconds:g} s: taken once unchanged"
    return None


def _classify(path: Path, passages_format: str | None) -> tuple[str, str | None] | str:
    """("dump", None) or ("passages", format) for a regular file, else why it is ignored."""
    name = path.name.lower()
    if name.endswith(DUMP_SUFFIXES):
        return ("dump", None)
    fmt = PASSAGE_FORMATS.get(path.suffix.lower()) or passages_format
    return ("passages", fmt) if fmt else "not a dump (.xml, .xml.bz2) or passages file (.tsv, .jsonl)"


def _look_at_entry(incoming: Incoming, path: Path, passages_format: str | None, settle_seconds: float,
                   now: float) -> Taken | None:  # fmt: skip
    """The entry as a file to take, or None with why filed in `incoming`."""
    name = path.name
    if (shown := _odd_name(name)) is not None:
        incoming.refused[shown] = ODD_NAME
        return None
    why = _temporary(name) if incoming.folder else None
    if why:
        incoming.left[name] = why
        return None
    looked = os.lstat(path)
    if (why := _not_plain(looked.st_mode)) is not None:
        incoming.refused[name] = why
        return None
    data, kind = path, _classify(path, passages_format)
    if stat.S_ISDIR(looked.st_mode):
        if name == REJECTED and incoming.folder:
            incoming.ignored[name] = "where malformed files are set aside"
            return None
        data, kind = path / BEIR_CORPUS, ("passages", "beir")
        try:
            looked = os.lstat(data)
        except FileNotFoundError:
            incoming.ignored[name] = f"a folder without {BEIR_CORPUS}"
            return None
        if (why := _not_plain(looked.st_mode)) is not None or stat.S_ISDIR(looked.st_mode):
            incoming.refused[name] = f"its {BEIR_CORPUS} is {why or 'a folder'}"
            return None
    if isinstance(kind, str):
        incoming.ignored[name] = kind
        return None
    if looked.st_nlink > 1:
        incoming.refused[name] = f"a hard link ({looked.st_nlink} names): copy the file into the folder instead"
        return None
    if (why := _unsettled(looked, settle_seconds, now)) is not None:
        incoming.left[name] = why
        return None
    return Taken(path, data, kind[0], kind[1], looked)


def look_at(source: Path, passages_format: str | None = None, settle_seconds: float = 0.0,
            now: float | None = None) -> Incoming:  # fmt: skip
    """What `source` (a file or a folder; a link to one is followed, its entries never are) holds
    for a re-index: the newest complete dump and every complete passages file, and each other
    entry with why it is left for later, refused or ignored. A file whose name says nothing is
    read as `passages_format`; a missing source raises, naming it."""
    source = source.expanduser()
    if not source.exists():
        raise FileNotFoundError(f"the re-index source {source} does not exist: give an existing dump, passages "
                                f"file or folder (the default, {INCOMING}/ in the workspace, is created when empty)")
    source = source.resolve()  # the watched path itself may be a link; what it holds is checked entry by entry
    now = time.time() if now is None else now
    incoming = Incoming(source, folder=source.is_dir())
    entries = sorted(source.iterdir()) if incoming.folder else [source]
    dumps = []
    for path in entries:
        taken = _look_at_entry(incoming, path, passages_format if path == source else None, settle_seconds, now)
        if taken is None:
            continue
        if taken.kind == "dump":
            dumps.append(taken)
        else:
            incoming.passages.append(taken)
    if dumps:
        dumps.sort(key=lambda t: (t.looked.st_mtime, t.path.name))
        incoming.dump = dumps[-1]
        incoming.ignored.update({t.path.name: f"an older dump than {incoming.dump.path.name}" for t in dumps[:-1]})
    return incoming


def given(dump: str | None, passages: str | None, passages_format: str) -> Incoming:
    """The dump and passages file (or BEIR folder) named to a re-index: taken as they are (their
    user chose them: links are followed, no settle time), checked and opened like watched ones."""
    incoming = Incoming(Path(passages or dump or ".").expanduser().resolve(), folder=False)
    for named, kind, fmt in ((dump, "dump", None), (passages, "passages", passages_format)):
        if not named:
            continue
        path = Path(named).expanduser().resolve()
        data = path / BEIR_CORPUS if kind == "passages" and fmt == "beir" and path.is_dir() else path
        if not data.is_file():
            raise FileNotFoundError(f"{'dump' if kind == 'dump' else 'passage file'} not found: {data}")
        taken = Taken(path, data, kind, fmt, os.stat(data), given=True)
        if kind == "dump":
            incoming.dump = taken
        else:
            incoming.passages.append(taken)
    return incoming


@contextlib.contextmanager
def open_taken(taken: Taken) -> Iterator[BinaryIO]:
    """The taken file, opened without following a link (the file itself and, in a BEIR folder,
    the folder) and checked to be the very file that was looked at, unchanged; else `NotTaken`."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if taken.given else os.O_NOFOLLOW)  # (a fifo never blocks)
    folder = None
    try:
        if taken.data != taken.path and not taken.given:
            folder = os.open(taken.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        fd = os.open(taken.data.name if folder is not None else taken.data, flags, dir_fd=folder)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotTaken("became a symbolic link after it was looked at", refused=True) from None
        if error.errno == errno.ENOENT:
            raise NotTaken("gone before it was read") from None
        raise NotTaken(f"cannot be opened ({os.strerror(error.errno or 0)})") from None
    finally:
        if folder is not None:
            os.close(folder)
    handle = os.fdopen(fd, "rb")
    with handle:
        opened = os.fstat(handle.fileno())
        if not stat.S_ISREG(opened.st_mode) or not taken.unchanged(opened):
            raise NotTaken("changed after it was looked at: taken once unchanged")
        yield handle


def still_unchanged(taken: Taken, handle: BinaryIO) -> bool:
    """After reading: whether the file kept its size and mtime (it did not grow while read)."""
    return taken.unchanged(os.fstat(handle.fileno()))


def set_aside(incoming: Incoming, taken: Taken, why: str) -> str | None:
    """Move a malformed entry into the folder's ``rejected/`` (stamped with the time, beside a
    ``.why`` note with the content-free reason), so the next runs take the other files; returns
    where it went, or None when it stays (a watched single file, a ``rejected`` that is not a
    folder of its own, or a move that failed).

    ``rejected`` is an entry of the watched folder like any other, so whoever drops files there
    can make it a link: it is opened without following one (`_rejected_folder`) and the file is
    moved and the note written relative to that very folder, never through a path that a link
    swapped in meanwhile would lead out of the watched folder."""
    if not incoming.folder:
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = f"{stamp}-{taken.path.name}"
    try:
        source = os.open(incoming.source, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        rejected = _rejected_folder(source)
        if rejected is None:
            return None
        try:
            try:
                os.lstat(name, dir_fd=rejected)
                return None  # (set aside under this name already, this very second)
            except FileNotFoundError:
                pass
            os.rename(taken.path.name, name, src_dir_fd=source, dst_dir_fd=rejected)
            with contextlib.suppress(OSError):
                _write_note(rejected, f"{name}.why", why + "\n")
        finally:
            os.close(rejected)
    except OSError:
        return None
    finally:
        os.close(source)
    return f"{REJECTED}/{name}"


def _rejected_folder(source: int) -> int | None:
    """A descriptor of ``rejected/`` in the watched folder `source` (made when missing), or None
    when that name is a link, a file or anything but a folder."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(REJECTED, 0o700, dir_fd=source)
    try:
        return os.open(REJECTED, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=source)
    except OSError:  # ELOOP: a link; ENOTDIR: a file
        return None


def _write_note(folder: int, name: str, text: str) -> None:
    """`text` as the file `name` in the folder `folder`, complete or not at all: written under a
    temporary name (created afresh, never through a link) and renamed into place."""
    temporary = f".{name}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as note:
            note.write(text)
            note.flush()
            os.fsync(note.fileno())
        os.rename(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        raise
