"""Content fingerprints: what makes a stage re-run a no-op and an index or embedding stale."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, BinaryIO


def file_sha256(path: Path | str, chunk_size: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, streamed (dumps are many GB; never read them whole)."""
    with open(path, "rb") as handle:
        return stream_sha256(handle, chunk_size)


def stream_sha256(handle: BinaryIO, chunk_size: int = 1 << 20) -> str:
    """SHA-256 of what is left to read in an open binary file, streamed."""
    digest = hashlib.sha256()
    while block := handle.read(chunk_size):
        digest.update(block)
    return digest.hexdigest()


def fingerprint(*parts: Any) -> str:
    """A stable hash of JSON-serialisable parts (parameters, file hashes, snapshot ids)."""
    payload = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
