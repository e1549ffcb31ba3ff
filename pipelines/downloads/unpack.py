"""Unpacking a verified download for its import: a `.gz` file decompressed, a `.zip` archive
extracted. Both write into a folder the caller builds aside (`storage.atomic.building_directory`),
so a killed unpack leaves nothing under the final name.

An archive member is refused when its path would leave the folder (absolute, `..`), when it is a
link, or when the archive's declared sizes exceed `max_bytes` (a zip bomb). Neither fills the
disk: an archive whose declared sizes would leave less than `keep_free` is refused before its
first member, and a `.gz` (whose size is only known once decompressed) stops at that margin."""

from __future__ import annotations

import gzip
import stat
import zipfile
from pathlib import Path, PurePosixPath

from ...storage.atomic import ensure_room, naming_full_disk
from ...storage.downloads import KEEP_FREE

_BLOCK = 1 << 20
MAX_UNPACKED_BYTES = 1 << 40  # 1 TiB: far above any resource of the registry, far below a bomb


def gunzip(source: Path, folder: Path, keep_free: int = KEEP_FREE) -> Path:
    """Decompress `source` (name.gz) to `folder/name`."""
    target = folder / (source.name[:-3] if source.name.endswith(".gz") else source.name + ".out")
    written = 0
    with naming_full_disk(target), gzip.open(source, "rb") as raw, open(target, "wb") as out:
        while block := raw.read(_BLOCK):
            written += len(block)
            ensure_room(target, len(block), keep_free, f"decompressing {source.name} has written {written:,} bytes")
            out.write(block)
    return target


def unzip(source: Path, folder: Path, max_bytes: int = MAX_UNPACKED_BYTES, keep_free: int = KEEP_FREE) -> Path:
    """Extract the archive `source` into `folder`, refusing members that leave it or are links."""
    with zipfile.ZipFile(source) as archive:
        members = archive.infolist()
        declared = sum(m.file_size for m in members)
        if declared > max_bytes:
            raise ValueError(f"{source}: the archive declares {declared:,} bytes unpacked, over the limit of "
                             f"{max_bytes:,}")  # fmt: skip
        ensure_room(folder / source.name, declared, keep_free, f"the archive {source.name} unpacks to {declared:,} bytes")
        for member in members:
            path = PurePosixPath(member.filename)
            if path.is_absolute() or ".." in path.parts or stat.S_ISLNK(member.external_attr >> 16):
                raise ValueError(f"{source}: member {member.filename!r} is a link or leaves the archive's folder")
        for member in members:
            archive.extract(member, folder)
    return folder
