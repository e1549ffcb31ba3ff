"""Checking a downloaded file: its sha256 (always, so it can be recorded and checked on every later
use) and, in the same pass, the digest its publisher gives (md5 for BEIR, sha1 for Wikimedia's dumps)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..progress import Progress

_BLOCK = 1 << 20


class ChecksumMismatch(ValueError):
    """A file whose bytes are not the ones its publisher (or its first download) vouched for."""


def digests(path: Path, algorithm: str = "sha256", progress: bool = False) -> tuple[str, str]:
    """(sha256, `algorithm`'s digest) of the file, read once in 1 MiB blocks."""
    sha256 = hashlib.sha256()
    other = hashlib.new(algorithm) if algorithm != "sha256" else sha256
    name = path.name.removesuffix(".part")  # a download is checked before it gets its name
    with open(path, "rb") as handle, Progress(path.stat().st_size, f"verify {name}", "B", enabled=progress,
                                              leave=False) as bar:  # fmt: skip
        while block := handle.read(_BLOCK):
            sha256.update(block)
            if other is not sha256:
                other.update(block)
            bar.update(len(block))
    return sha256.hexdigest(), other.hexdigest()


def digest_in_sums_file(text: str, file_name: str, sums_url: str, algorithm: str) -> str:
    """The digest a sums file (`<hex>  <file name>` per line, as `sha1sum` writes it) gives for
    `file_name`, or an error naming the sums file and what it lacks."""
    width = hashlib.new(algorithm).digest_size * 2
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if len(fields) == 2 and fields[1].lstrip("*") == file_name:
            digest = fields[0].lower()
            if len(digest) != width or any(c not in "0123456789abcdef" for c in digest):
                raise ChecksumMismatch(f"{sums_url}:{number}: expected a {algorithm} digest ({width} hex digits) "
                                       f"for {file_name}")  # fmt: skip
            return digest
    raise ChecksumMismatch(f"{sums_url}: no line for {file_name} (expected '<{algorithm}>  {file_name}')")


def check(file_name: str, name: str, expected: str, seen: str, algorithm: str, by: str) -> None:
    """Refuse a file whose digest is not the expected one, naming the resource and who vouched for it."""
    if seen != expected:
        raise ChecksumMismatch(f"{name}: {file_name} has {algorithm} {seen}, but {by} gives {expected}; the "
                               "file is corrupt or was changed at the source, and is not published")  # fmt: skip
