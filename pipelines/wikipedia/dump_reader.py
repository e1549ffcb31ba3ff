"""Stream pages out of a MediaWiki XML export (``.xml`` or ``.xml.bz2``, multistream included).

Why not ``bz2.open`` + ``ElementTree.iterparse``: we want the *compressed* position for error
messages on truncated files, and the *uncompressed* byte offset of every ``<page>`` (expat's
``CurrentByteIndex``), and we want to repair invalid UTF-8 instead of losing the whole dump to
one bad byte. So the file is read in blocks, decompressed with one ``BZ2Decompressor`` per bz2
stream (a multistream dump is simply many streams back to back), checked as UTF-8, and fed to
expat with small Python callbacks that keep only the fields we need. Memory is bounded by the
read block plus the largest single page: nothing of a finished page is kept.

Invalid UTF-8 policy: the offending bytes are replaced by U+FFFD before expat sees them and the
page that contains them is flagged ``invalid_utf8=True``; the ingest step then records the page
in ``articles`` but skips its passages and counts it (``skipped["invalid_utf8"]``).
"""

from __future__ import annotations

import bz2
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.parsers import expat

#: Compressed bytes read per step; decompressed blocks are a few times larger.
READ_BLOCK = 256 * 1024

_BZ2_MAGIC = b"BZh"
_UNSUPPORTED_MAGIC = {b"\x1f\x8b": "gzip", b"7z": "7-Zip", b"\xfd7": "xz"}
_REDIRECT_TEXT = re.compile(r"\s*#REDIRECT\s*:?\s*\[\[([^\]|#]*)", re.IGNORECASE)


class DumpError(Exception):
    """A dump cannot be read further: truncated, not bz2, malformed XML.

    The message names the file, the position (uncompressed XML byte, and compressed byte for
    bz2 files) and the last page that was read completely, so a user knows what was ingested.
    """


@dataclass(frozen=True, slots=True)
class RawPage:
    """One ``<page>`` of the export, before any wikitext processing.

    ``byte_offset`` is the offset of the ``<page>`` start tag in the *uncompressed* XML stream
    (exact unless invalid UTF-8 bytes were repaired earlier in the stream: each repaired byte
    shifts later offsets by up to two bytes). ``text`` is None when the page has no ``<text>``
    content (missing, empty or deleted revision text).
    """

    page_id: int
    title: str
    namespace: int
    redirect_target: str | None
    text: str | None
    byte_offset: int
    invalid_utf8: bool = False


class _Position:
    """Where the reader is, shared between the byte source and the page builder for errors."""

    __slots__ = ("compressed", "is_bz2", "last_title", "last_id")

    def __init__(self, is_bz2: bool) -> None:
        self.compressed = 0
        self.is_bz2 = is_bz2
        self.last_title: str | None = None
        self.last_id: int | None = None


def _error(path: Path, pos: _Position, uncompressed: int, what: str) -> DumpError:
    where = f"uncompressed byte {uncompressed}"
    if pos.is_bz2:
        where += f", compressed byte {pos.compressed}"
    if pos.last_id is None:
        last = "no page was read completely"
    else:
        last = f"last complete page: {pos.last_title!r} (id {pos.last_id})"
    return DumpError(f"{path}: {what} at {where}; {last}")


def _raw_blocks(path: Path, pos: _Position) -> Iterator[bytes]:
    """Yield uncompressed blocks; bz2 streams are decompressed one after another."""
    with path.open("rb") as f:
        if not pos.is_bz2:
            while block := f.read(READ_BLOCK):
                pos.compressed += len(block)
                yield block
            return
        decompressor = bz2.BZ2Decompressor()
        stream_started = False
        while raw := f.read(READ_BLOCK):
            pos.compressed += len(raw)
            while raw:
                stream_started = True
                try:
                    out = decompressor.decompress(raw)
                except OSError as exc:
                    raise DumpError(f"invalid bz2 data ({exc})") from exc
                if out:
                    yield out
                if decompressor.eof:
                    # Multistream: whatever follows the end of one stream starts the next.
                    raw = decompressor.unused_data
                    decompressor = bz2.BZ2Decompressor()
                    stream_started = False
                else:
                    raw = b""
        if stream_started:
            raise DumpError("truncated bz2 stream (end of file inside a compressed stream)")


def _check_utf8(data: bytes, tail: bytes, base: int, bad: deque[int]) -> tuple[bytes, bytes]:
    """Return (bytes safe to feed expat, incomplete trailing sequence to prepend next time).

    ``base`` is the uncompressed offset of ``tail + data``. Offsets of invalid bytes are
    appended to ``bad`` so the page containing them can be flagged. The common case (valid
    UTF-8) costs one ``decode`` and returns the original bytes untouched.
    """
    buf = tail + data if tail else data
    try:
        buf.decode("utf-8")
        return buf, b""
    except UnicodeDecodeError:
        pass
    parts: list[str] = []
    i = 0
    while True:
        try:
            parts.append(buf[i:].decode("utf-8"))
            return "".join(parts).encode("utf-8"), b""
        except UnicodeDecodeError as exc:
            parts.append(buf[i : i + exc.start].decode("utf-8"))
            if exc.reason == "unexpected end of data":
                # A multi-byte character split across blocks: keep its start for next time.
                return "".join(parts).encode("utf-8"), buf[i + exc.start :]
            parts.append("\ufffd")
            bad.append(base + i + exc.start)
            i += exc.end


class _PageBuilder:
    """Expat callbacks that assemble ``RawPage`` objects from the element stream."""

    def __init__(self, parser: expat.XMLParserType) -> None:
        self._parser = parser
        self._stack: list[str] = []
        self._capture: str | None = None
        self._buf: list[str] = []
        self.namespaces: dict[str, int] = {}
        self.done: list[RawPage] = []
        self.bad_offsets: deque[int] = deque()
        self._ns_key = 0
        self._reset()
        parser.StartElementHandler = self._start
        parser.EndElementHandler = self._end
        parser.CharacterDataHandler = self._chars

    def _reset(self) -> None:
        self._title: str | None = None
        self._ns: int | None = None
        self._id: int | None = None
        self._redirect: str | None = None
        self._text: str | None = None
        self._offset = 0

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        stack = self._stack
        depth = len(stack)
        stack.append(name)
        if depth == 1:
            if name == "page":
                self._reset()
                self._offset = self._parser.CurrentByteIndex
        elif depth == 2:
            if stack[1] == "page":
                if name in ("title", "ns", "id"):
                    self._capture = name
                    self._buf = []
                elif name == "redirect":
                    self._redirect = attrs.get("title")
        elif depth == 3:
            if name == "text" and stack[2] == "revision":
                self._capture = "text"
                self._buf = []
            elif name == "namespace" and stack[2] == "namespaces":
                self._capture = "namespace"
                self._buf = []
                self._ns_key = int(attrs.get("key", "0"))

    def _chars(self, data: str) -> None:
        if self._capture is not None:
            self._buf.append(data)

    def _end(self, name: str) -> None:
        stack = self._stack
        stack.pop()
        capture = self._capture
        if capture is not None and len(stack) in (2, 3):
            value = "".join(self._buf)
            self._capture = None
            if capture == "text":
                self._text = value  # the last revision wins (history dumps)
            elif capture == "title":
                self._title = value
            elif capture == "ns":
                self._ns = int(value)
            elif capture == "id":
                self._id = int(value)
            elif capture == "namespace" and value:
                self.namespaces[value] = self._ns_key
        elif name == "page" and len(stack) == 1:
            self.done.append(self._finish_page())

    def _finish_page(self) -> RawPage:
        title, page_id = self._title, self._id
        if title is None or page_id is None:
            raise ValueError(f"<page> at byte {self._offset} lacks <title> or <id>")
        ns = self._ns if self._ns is not None else self._namespace_from_title(title)
        text = self._text or None
        redirect = self._redirect
        if redirect is None and text is not None and text[:20].lstrip()[:1] == "#":
            match = _REDIRECT_TEXT.match(text)  # old dumps have no <redirect> element
            if match and match.group(1).strip():
                redirect = match.group(1).strip()
        bad = self.bad_offsets
        while bad and bad[0] < self._offset:
            bad.popleft()
        end = self._parser.CurrentByteIndex
        invalid = bool(bad) and bad[0] < end
        return RawPage(page_id, title, ns, redirect, text, self._offset, invalid)

    def _namespace_from_title(self, title: str) -> int:
        prefix, sep, _ = title.partition(":")
        return self.namespaces.get(prefix, 0) if sep else 0


def iter_pages(path: Path) -> Iterator[RawPage]:
    """Yield every ``<page>`` of a MediaWiki export in dump order.

    Raises ``DumpError`` (file, offset, last complete page in the message) on a truncated or
    corrupt bz2 file and on malformed XML; pages before the error have been yielded already.
    """
    path = Path(path)
    with path.open("rb") as f:
        magic = f.read(3)
    if magic[:2] in _UNSUPPORTED_MAGIC:
        raise DumpError(
            f"{path}: {_UNSUPPORTED_MAGIC[magic[:2]]}-compressed file; expected MediaWiki XML (.xml) or .xml.bz2"
        )
    pos = _Position(is_bz2=magic == _BZ2_MAGIC)
    parser = expat.ParserCreate()
    parser.buffer_text = True
    parser.buffer_size = 1 << 20
    builder = _PageBuilder(parser)
    fed = 0  # uncompressed bytes passed through the UTF-8 check
    tail = b""
    blocks = _raw_blocks(path, pos)
    while True:
        try:
            block = next(blocks, None)
        except DumpError as exc:
            raise _error(path, pos, fed, str(exc)) from exc
        final = block is None
        if final:
            data = b""
            if tail:  # the file ends inside a multi-byte character
                builder.bad_offsets.append(fed - len(tail))
                data, tail = "\ufffd".encode(), b""
        else:
            base = fed - len(tail)
            fed += len(block)
            data, tail = _check_utf8(block, tail, base, builder.bad_offsets)
        failure: str | None = None
        try:
            parser.Parse(data, final)
        except expat.ExpatError as exc:
            failure = f"malformed XML ({expat.ErrorString(exc.code)}, line {exc.lineno} column {exc.offset})"
        except ValueError as exc:
            failure = f"malformed page: {exc}"
        done = builder.done
        if done:
            builder.done = []
            for page in done:  # pages completed before a failure in the same block are good
                pos.last_title, pos.last_id = page.title, page.page_id
                yield page
        if failure is not None:
            raise _error(path, pos, parser.CurrentByteIndex, failure)
        if final:
            return
