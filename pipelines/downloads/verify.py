"""What a downloaded file is checked against, in order: the digest its publisher gives (in the
registry, or in a sums file the publisher serves), else the sha256 recorded at its first download,
else nothing yet (its sha256 is then recorded, and every later use is checked against it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from .checksums import ChecksumMismatch, check, digest_in_sums_file, digests
from .registry import Resource, mirrored

MAX_SUMS_FILE_BYTES = 4 << 20  # a dump's sums file lists a few hundred files: ~50 KB


@dataclass(frozen=True)
class Verified:
    sha256: str
    bytes: int
    verified_by: str  # "md5 (registry)", "sha1 (publisher's sums file)", "sha256 (first download)", "recorded now"


def _sums_file_text(url: str, mirror: str, timeout_s: float) -> str:
    """The publisher's sums file (through the mirror, if one is given), read up to a bound."""
    address = mirrored(url, mirror)
    try:
        with requests.get(address, stream=True, timeout=timeout_s) as response:
            response.raise_for_status()
            raw = response.raw.read(MAX_SUMS_FILE_BYTES + 1, decode_content=True)
    except requests.RequestException as exc:
        raise ChecksumMismatch(f"{address}: the sums file to check against could not be read ({exc})") from exc
    if len(raw) > MAX_SUMS_FILE_BYTES:
        raise ChecksumMismatch(f"{address}: a sums file longer than {MAX_SUMS_FILE_BYTES:,} bytes is refused")
    return raw.decode("utf-8", errors="replace")


def verify(path: Path, resource: Resource, seen: dict[str, Any] | None, mirror: str = "",
           progress: bool = False, timeout_s: float = 60.0) -> Verified:  # fmt: skip
    """Check the file at `path` (a partial file about to be published, or a published one on a
    later use); raise `ChecksumMismatch` naming the resource and who vouched for other bytes."""
    size = path.stat().st_size
    if resource.size is not None and size != resource.size:
        raise ChecksumMismatch(f"{resource.name}: {resource.file_name} has {size:,} bytes, the registry ({resource.origin}) "
                               f"gives {resource.size:,}; it is not published")  # fmt: skip
    checksum = resource.checksum
    algorithm = checksum.algorithm if checksum else "sha256"
    sha256, other = digests(path, algorithm, progress)
    if checksum is not None:
        if checksum.digest:
            expected, by = checksum.digest, f"the registry ({resource.origin})"
        else:
            text = _sums_file_text(checksum.sums_url, mirror, timeout_s)
            expected, by = digest_in_sums_file(text, resource.file_name, checksum.sums_url, algorithm), checksum.sums_url
        check(resource.file_name, resource.name, expected, other, algorithm, by)
        return Verified(sha256, size, f"{algorithm} (registry)" if checksum.digest else f"{algorithm} (publisher's sums file)")
    if seen is not None:
        check(resource.file_name, resource.name, str(seen.get("sha256")), sha256, "sha256",
              "the record of its first download (downloads/seen-sha256.json)")  # fmt: skip
        return Verified(sha256, size, "sha256 (first download)")
    return Verified(sha256, size, "sha256 recorded now (the publisher gives no checksum)")
