"""One file over HTTP into its partial file: resumed, retried, bounded.

- **Resume.** Bytes already in the partial file are asked for no more: the request carries
  `Range: bytes=<size>-` (and `If-Range` with the validator the partial was fetched under, so a
  changed file starts again instead of being spliced). A `206` whose `Content-Range` starts there
  is appended; a `200` (the server ignores ranges, or the file changed) starts again from byte 0;
  a `416` means the partial already holds the whole file (kept when its size is the file's) or
  is longer than it (started again).
- **Retries.** A connection reset, a timeout, a transfer cut short and HTTP 408/429/5xx are
  retried with exponential backoff (1 s, 2 s, 4 s ... at most `max_backoff_s`), each retry
  resuming where the last stopped; after `retries` failures the next URL (a mirror of the same
  file) is tried. Other HTTP errors (404, 403 ...) go to the next URL at once, and so does a
  host name that does not resolve: offline, or with a mistyped host, retrying cannot help, and
  neither `wget` (without `--retry-on-host-error`) nor `curl --retry` retries it either.
- **Bounds.** The body is read in blocks of `block` bytes; a server that sends more than the
  size it announced (or the registry's size) is refused, and so is an announced size that is
  not the registry's. The disk keeps `keep_free` bytes free: a download whose size is known is
  refused before its first byte when the rest would not fit, and one of no known size stops
  when it reaches that margin (`KeptFreeError`, the bytes so far kept), rather than fill the disk.
- Redirects are followed (`requests`, at most 30).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests
from urllib3.exceptions import NameResolutionError

from ...storage.atomic import ensure_room, naming_full_disk
from ...storage.downloads import (
    KEEP_FREE,
    DownloadSlot,
    discard_part,
    open_part,
    part_size,
    read_part_state,
    write_part_state,
)
from ..progress import Progress

_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED = re.compile(r"bytes\s+\*/(\d+)")


class TransferError(RuntimeError):
    """A file that could not be fetched from any of its URLs; the message says what each answered."""


class _Transient(Exception):
    """A failure worth retrying (the reason is the message)."""


@dataclass(frozen=True)
class TransferPolicy:
    retries: int = 5  # retries per URL after the first try
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    timeout_s: float = 60.0  # connect and per-read timeout
    block: int = 1 << 20
    keep_free: int = KEEP_FREE  # bytes a download leaves free on the downloads' file system


def _total_of(response: requests.Response, offset: int) -> int | None:
    """The whole file's size as the response announces it."""
    if response.status_code == 206:
        match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
        return int(match.group(3)) if match and match.group(3) != "*" else None
    length = response.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def _range_start(response: requests.Response) -> int | None:
    match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
    return int(match.group(1)) if match else None


def _headers(offset: int, state: dict) -> dict[str, str]:
    headers = {"User-Agent": "odqa-fetch/0.1 (open-domain QA data; python-requests)", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        validator = state.get("etag") or state.get("last_modified")
        if validator:
            headers["If-Range"] = validator
    return headers


def _receive(response: requests.Response, slot: DownloadSlot, url: str, offset: int, expected: int | None,
             policy: TransferPolicy, bar: Progress) -> int:  # fmt: skip
    """Write the response's body after `offset` bytes; return the file's whole size once complete."""
    if response.status_code == 206 and _range_start(response) != offset:
        discard_part(slot)  # a range we did not ask for: start again rather than splice
        raise _Transient(f"{url}: answered a range that does not start at byte {offset:,}")
    if response.status_code == 200:
        offset = 0
    total = _total_of(response, offset)
    if total is not None and expected is not None and total != expected:
        raise TransferError(f"{url}: the server announces {total:,} bytes, the registry {expected:,}; "
                            "not the file the registry names")  # fmt: skip
    limit = total if total is not None else expected
    write_part_state(slot, {"url": url, "etag": response.headers.get("ETag", ""),
                            "last_modified": response.headers.get("Last-Modified", ""), "total": limit})  # fmt: skip
    bar.restart(limit, offset)
    # A body cut short then ends where it stops instead of raising (which would lose the bytes
    # urllib3 holds in its buffer); `offset < limit` below says it was cut, and the bytes are kept.
    response.raw.enforce_content_length = False
    if limit is not None:
        ensure_room(slot.part, limit - offset, policy.keep_free, f"{limit - offset:,} more bytes to fetch")
    with naming_full_disk(slot.part), open_part(slot, append=offset > 0) as out:
        for chunk in response.iter_content(policy.block):
            offset += len(chunk)
            if limit is not None and offset > limit:
                raise TransferError(f"{url}: sent more than the {limit:,} bytes of the file")
            if limit is None:
                out.flush()  # the margin is judged on what is on disk, not on what waits in the buffer
                ensure_room(slot.part, len(chunk), policy.keep_free,
                            f"{url} gives no size (nor does the registry) and has sent {offset:,} bytes; stopped "
                            "there (the bytes are kept: fetch again to resume)")  # fmt: skip
            out.write(chunk)
            bar.update(len(chunk))
    if limit is not None and offset < limit:
        raise _Transient(f"{url}: the transfer stopped at byte {offset:,} of {limit:,}")
    return offset


def _unresolved_host(exc: BaseException) -> BaseException | None:
    """The resolver's error when a connection error is a host name that did not resolve, else None
    (requests wraps urllib3's error, which wraps the resolver's `gaierror`, in
    `MaxRetryError.reason` and the causes)."""
    seen: set[int] = set()
    pending: list[object] = [exc]
    while pending:
        error = pending.pop()
        if not isinstance(error, BaseException) or id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, NameResolutionError | socket.gaierror):
            return error
        pending.extend([*error.args, getattr(error, "reason", None), error.__cause__, error.__context__])
    return None


def _try_once(session: requests.Session, url: str, slot: DownloadSlot, expected: int | None,
              policy: TransferPolicy, bar: Progress) -> int:  # fmt: skip
    state = read_part_state(slot)
    offset = part_size(slot) if state else 0
    if offset and expected is not None and offset > expected:
        discard_part(slot)
        offset = 0
    try:
        with session.get(url, headers=_headers(offset, state), stream=True,
                         timeout=(policy.timeout_s, policy.timeout_s)) as response:  # fmt: skip
            if response.status_code == 416:
                match = _UNSATISFIED.fullmatch(response.headers.get("Content-Range", "").strip())
                if match and int(match.group(1)) == offset and offset:
                    return offset  # the partial file is the whole file
                discard_part(slot)
                raise _Transient(f"{url}: the partial file ({offset:,} bytes) does not fit the file; starting again")
            if response.status_code in _TRANSIENT_STATUS:
                raise _Transient(f"{url}: HTTP {response.status_code} {response.reason}")
            if response.status_code not in (200, 206):
                raise TransferError(f"{url}: HTTP {response.status_code} {response.reason}")
            return _receive(response, slot, url, offset, expected, policy, bar)
    except requests.ConnectionError as exc:
        unresolved = _unresolved_host(exc)
        if unresolved is not None:
            host = urlsplit(url).hostname
            raise TransferError(f"{url}: the host name {host} does not resolve (no network, or no DNS "
                                f"here?): {unresolved}") from exc
        raise _Transient(f"{url}: {type(exc).__name__}: {exc}") from exc
    except (requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
        raise _Transient(f"{url}: {type(exc).__name__}: {exc}") from exc


def transfer(urls: Sequence[str], slot: DownloadSlot, expected_size: int | None = None,
             policy: TransferPolicy = TransferPolicy(), progress: bool = True,
             sleep: Callable[[float], None] = time.sleep) -> int:  # fmt: skip
    """Fetch the file into `slot.part` from the first of `urls` that serves it; its size in bytes.

    The partial file is left in place on failure, so the next call resumes it."""
    failures: list[str] = []
    with requests.Session() as session, Progress(None, f"fetch {slot.final.name}", "B", enabled=progress,
                                                 leave=False) as bar:  # fmt: skip
        for url in urls:
            for attempt in range(policy.retries + 1):
                try:
                    return _try_once(session, url, slot, expected_size, policy, bar)
                except _Transient as exc:
                    reason = str(exc)
                    if attempt < policy.retries:
                        sleep(min(policy.max_backoff_s, policy.backoff_s * 2**attempt))
                except TransferError as exc:
                    reason = str(exc)
                    break
            failures.append(reason)
    raise TransferError(f"{slot.final.name}: not fetched; " + "; ".join(failures)
                        + (". The bytes received so far are kept: fetch again to resume" if part_size(slot) else ""))
