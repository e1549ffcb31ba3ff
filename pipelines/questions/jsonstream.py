"""Streaming readers for the JSON shapes question datasets ship in.

T-REx files and DPR's retriever training files are single JSON *arrays* that run to gigabytes
(DPR's nq-train.json is ~8 GB), so `json.load` is out of the question. Instead of depending on
an incremental parser package (ijson is not part of the environment), the array is read in
chunks and each element is decoded with the standard library's `JSONDecoder.raw_decode`, which
parses one value from a position in a string and reports where it ended. Memory stays at one
element plus one chunk; an element that straddles a chunk boundary is retried once more text is
buffered. Errors name the file, the element's ordinal and its character offset.

JSON Lines files get a reader that skips blank lines and names the line of a bad record.

Python's `json` lets some things through or reports them without a position; they are named
here. A record nested deeper than the decoder can follow (it recurses once per level, up to the
interpreter's recursion limit, about a thousand levels) gets its file, line or element and offset
instead of "maximum recursion depth exceeded". A file that starts with a UTF-8 byte order mark is
refused saying so; refused rather than skipped because the loaders these formats come from
refuse it too: DPR and BEIR read with `json.load(open(path, encoding="utf-8"))` /
`json.loads(line)`, which stop at a BOM ("Unexpected UTF-8 BOM"). A string holding an unpaired
UTF-16 surrogate (the escape `\udc80` without its pair) is refused naming the record and the
key: `json.load` reads it into a str that no UTF-8 file or table can hold, so it would fail later,
unnamed. And, as with `json.load`, a JSON array file ends at its closing bracket: anything but
whitespace after it (a second array) is refused, not dropped.

Every record (a line, or an element of an array) is bounded by ``MAX_RECORD_BYTES`` (a
caller's ``max_bytes``) while it is read, so one malformed huge record costs that much memory at
most; bytes that are not UTF-8 are refused naming the file and the line (or character offset).
A `.gz` or `.bz2` file is read through its decompressor; one cut short (an interrupted download)
or not compressed as its name says is refused naming the file and the line it was read to
(`CompressedStreamError`), where gzip and bz2 themselves raise an `EOFError` that names neither.
"""

from __future__ import annotations

import bz2
import gzip
import io
import itertools
import json
import re
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

_CHUNK = 1 << 20  # characters read per step; an element larger than this just takes more steps
# The longest record a question import accepts: a line, or one element of a JSON array (a DPR
# training element carries its ~100 contexts, ~100 KB). Larger is a broken file (a missing
# bracket, a file of another format); `odqa import questions --max-record-bytes` changes it.
MAX_RECORD_BYTES = 8 << 20
_WHITESPACE = " \t\n\r"
_NUMBER_CHARS = "0123456789.eE+-"
BOM = "\ufeff"
# A JSON escape of a UTF-16 surrogate: only text holding one can decode to an unpaired surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# The keys of the question and passage formats (DPR, SQuAD, NQ-open, EntityQuestions, BEIR).
_SCHEMA_KEYS = frozenset({"question", "answers", "answer", "id", "question_id", "positive_ctxs", "negative_ctxs",
                          "hard_negative_ctxs", "title", "text", "passage_id", "psg_id", "score", "data", "paragraphs",
                          "context", "qas", "answer_start", "_id", "metadata"})  # fmt: skip


class JsonFormatError(ValueError):
    """A JSON / JSON Lines input that does not have the expected shape, with its position."""


def too_deep(where: str) -> JsonFormatError:
    """The error for a record nested deeper than Python's JSON decoder follows (it recurses once
    per level of arrays and objects, up to the interpreter's recursion limit)."""
    return JsonFormatError(f"{where}: nested deeper than the JSON reader follows (about {sys.getrecursionlimit():,} "
                           "levels of arrays and objects, Python's recursion limit); question and passage "
                           "records nest a few levels: is this the right file and format?")  # fmt: skip


def refuse_bom(text: str, path: Path) -> None:
    """Refuse a JSON file that starts with a UTF-8 byte order mark (see the module doc for why)."""
    if text.startswith(BOM):
        raise JsonFormatError(f"{path}: starts with a UTF-8 byte order mark (BOM, bytes EF BB BF), which JSON "
                              "readers refuse (Python's json.load, DPR's and BEIR's loaders); save the file as "
                              "UTF-8 without a BOM, e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' FILE")  # fmt: skip


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unpaired_surrogate_at(value: Any, at: str = "") -> str | None:
    """Where in `value` (`.question`, `.answers[2]`; "" for `value` itself) the first string (or
    object key) holding an unpaired surrogate is, or None when every string is text. Keys of the
    formats' own schemas are named; any other key is `<key>`, so that the path quotes nothing of
    the file."""
    if isinstance(value, str):
        return None if _is_text(value) else at
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, int):
            inner = f"{at}[{key}]"
        else:
            inner = f"{at}.{key if key in _SCHEMA_KEYS else '<key>'}"
            if not _is_text(key):
                return inner
        found = _unpaired_surrogate_at(item, inner)
        if found is not None:
            return found
    return None


def refuse_unpaired_surrogates(value: Any, where: str, name: str = "") -> None:
    """Refuse a decoded value with a string holding an unpaired surrogate (see the module doc);
    the message names `where` and the key (`value` itself is called `name`), never the text."""
    try:
        at = _unpaired_surrogate_at(value, name)
    except RecursionError:
        raise too_deep(where) from None
    if at is not None:
        what = at.removeprefix(".") or "a string"
        raise JsonFormatError(f"{where}: {what} holds an unpaired UTF-16 surrogate (an escape \\ud800-\\udfff "
                              "without its pair), which is not text: no UTF-8 file or table can hold it")  # fmt: skip


def decoded_text(text: str, value: Any, where: str) -> Any:
    """`value` (decoded from `text`), refused when a string of it holds an unpaired surrogate;
    only text with a surrogate escape is looked into."""
    if _SURROGATE_ESCAPE.search(text):
        refuse_unpaired_surrogates(value, where)
    return value


_JSON_TYPES = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}


def title_text(value: Any, where: str) -> str:
    """A passage title read from JSON: a string as it is, "" for a null or missing one (BEIR
    corpora and DPR contexts have both). Any other value is refused, naming `where` and the JSON
    type (never the value): `str()` of it made titles such as "None" or "['x']", and the reference
    loaders fail on it later (BEIR's models add title and text as strings)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    kind = _JSON_TYPES.get(type(value), "value")
    raise JsonFormatError(f"{where}: title must be a string (or null), got a JSON {kind}")


def json_problem(exc: json.JSONDecodeError) -> str:
    """What a JSON decoder found, for a message that adds its own position: Python's "Invalid
    control character at" (a raw tab or line end inside a string) ends in an "at" of its own."""
    return exc.msg.removesuffix(" at")


def decode_json_line(line: str, path: Path, line_no: int) -> Any:
    """The JSON value of one line of a JSON Lines file; every error names the file and line."""
    where = f"{path}:{line_no}"
    if line_no == 1:
        refuse_bom(line, path)
    try:
        return decoded_text(line, json.loads(line), where)
    except RecursionError:
        raise too_deep(where) from None
    except json.JSONDecodeError as exc:
        raise JsonFormatError(f"{where}: not valid JSON ({json_problem(exc)} at column {exc.colno})") from None


class CompressedStreamError(JsonFormatError):
    """A .gz/.bz2 file whose compressed stream cannot be read on: cut short, or not that format.

    ``detail`` says what, without the file's name, so that a line reader can put the line it was
    reading in front of it (``FILE:LINE: detail``); ``str()`` is ``FILE: detail``.
    """

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


class _Decompressed(io.BufferedIOBase):
    """The decompressed bytes of a .gz/.bz2 file, with the errors of a broken stream named.

    gzip and bz2 raise ``EOFError("Compressed file ended before the end-of-stream marker was
    reached")`` for a cut file and ``OSError`` ("Not a gzipped file", "Invalid data stream") or
    ``zlib.error`` for bytes of another kind, none naming the file. A truncated download is the
    common bad input here, so each is turned into a `CompressedStreamError` naming the file, the
    compression and how many bytes were read before it.
    """

    def __init__(self, path: Path, kind: str, inner: io.BufferedIOBase) -> None:
        super().__init__()
        self._path, self._kind, self._inner = path, kind, inner
        self._delivered = 0  # uncompressed bytes returned so far

    def readable(self) -> bool:
        return True

    def _guarded(self, read: Callable[[int], bytes], size: int) -> bytes:
        try:
            data = read(size)
        except EOFError:
            raise CompressedStreamError(
                self._path, f"the {self._kind} stream ends before its end marker, after {self._delivered:,} "
                "uncompressed bytes: the file is cut short (an interrupted download or copy?)") from None  # fmt: skip
        except gzip.BadGzipFile:  # its message quotes the file's first bytes: say it without them
            raise CompressedStreamError(
                self._path, f"not gzip data after {self._delivered:,} uncompressed bytes (no gzip header, bytes "
                "1f 8b, where one was due), though the name ends in .gz: is the file compressed that way?") from None  # fmt: skip
        except (OSError, zlib.error) as exc:
            raise CompressedStreamError(
                self._path, f"not readable as {self._kind} data after {self._delivered:,} uncompressed bytes "
                f"({exc}); the name ends in {self._path.suffix}: is the file compressed that way?") from None  # fmt: skip
        self._delivered += len(data)
        return data

    def read(self, size: int | None = -1) -> bytes:
        return self._guarded(self._inner.read, -1 if size is None else size)

    def read1(self, size: int = -1) -> bytes:
        return self._guarded(self._inner.read1, size)

    def readline(self, size: int | None = -1) -> bytes:
        return self._guarded(self._inner.readline, -1 if size is None else size)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def open_binary(path: Path) -> io.BufferedIOBase:
    """Open a (possibly .gz/.bz2 compressed) file for reading bytes; a broken compressed stream
    raises `CompressedStreamError` naming the file."""
    path = Path(path)
    if path.suffix == ".gz":
        return _Decompressed(path, "gzip", gzip.open(path, "rb"))
    if path.suffix == ".bz2":
        return _Decompressed(path, "bz2", bz2.open(path, "rb"))
    return open(path, "rb")  # noqa: SIM115 (the caller closes it)


def open_text(path: Path) -> TextIO:
    """Open a (possibly .gz/.bz2 compressed) UTF-8 text file; real dumps ship compressed."""
    path = Path(path)
    if path.suffix in (".gz", ".bz2"):
        return io.TextIOWrapper(open_binary(path), encoding="utf-8")
    return open(path, encoding="utf-8")


def read_lines(path: Path, max_bytes: int = MAX_RECORD_BYTES) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, read as bytes with a bounded length and decoded here,
    so an over-long record costs at most ``max_bytes`` and a bad byte names its line."""
    with open_binary(path) as handle:
        for number in itertools.count(1):
            try:
                raw = handle.readline(max_bytes + 2)
            except CompressedStreamError as exc:
                raise JsonFormatError(f"{path}:{number}: {exc.detail}") from None
            if not raw:
                return
            if len(raw.rstrip(b"\r\n")) > max_bytes:
                raise JsonFormatError(f"{path}:{number}: record longer than {max_bytes:,} bytes, the import limit "
                                      "(--max-record-bytes); is this the right file and format?")  # fmt: skip
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise JsonFormatError(f"{path}:{number}: not UTF-8 (byte 0x{raw[exc.start]:02x} at byte "
                                      f"{exc.start + 1} of the line); question files must be UTF-8") from None  # fmt: skip


def iter_json_lines(path: Path, max_bytes: int = MAX_RECORD_BYTES) -> Iterator[tuple[int, Any]]:
    """(line number, decoded value) for every non-blank line; a bad line names file and line."""
    for line_no, line in read_lines(path, max_bytes):
        if not line.strip():
            continue
        yield line_no, decode_json_line(line, path, line_no)


def iter_json_array(path: Path, max_bytes: int = MAX_RECORD_BYTES) -> Iterator[Any]:
    """Each element of a top-level JSON array, decoded one at a time with bounded memory (an
    element over ``max_bytes`` characters is refused)."""
    decoder = json.JSONDecoder()
    with open_text(path) as handle:
        buf = ""
        pos = 0  # index in buf of the next unread character
        consumed = 0  # characters dropped from the front of buf so far (for error offsets)
        eof = False

        def fill() -> bool:
            nonlocal buf, pos, consumed, eof
            if eof:
                return False
            try:
                chunk = handle.read(max(_CHUNK, len(buf) - pos))  # doubling: big elements parse in linear time
            except UnicodeDecodeError as exc:
                raise JsonFormatError(f"{path}: not UTF-8 (byte 0x{exc.object[exc.start]:02x} after character "
                                      f"{consumed + len(buf):,}); question files must be UTF-8") from None  # fmt: skip
            if not chunk:
                eof = True
                return False
            buf = buf[pos:] + chunk
            consumed += pos
            pos = 0
            return True

        def next_significant() -> str:
            """Skip whitespace; return the next character ("" at end of input)."""
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in _WHITESPACE:
                    pos += 1
                if pos < len(buf):
                    return buf[pos]
                if not fill():
                    return ""

        def end_of_array() -> None:
            """After the closing bracket only whitespace may follow, as json.load requires."""
            nonlocal pos
            pos += 1
            if next_significant():
                raise JsonFormatError(f"{path}: offset {consumed + pos}: data after the JSON array's closing ']' "
                                      "(json.load refuses it too): one file holds one array")  # fmt: skip

        if next_significant() != "[":
            refuse_bom(buf[pos:], path)
            raise JsonFormatError(f"{path}: offset {consumed + pos}: expected a JSON array ('[')")
        pos += 1
        index = 0
        if next_significant() == "]":
            end_of_array()
            return
        while True:
            start = consumed + pos
            while True:
                try:
                    value, end = decoder.raw_decode(buf, pos)
                except RecursionError:
                    raise too_deep(f"{path}: element {index} at offset {start}") from None
                except json.JSONDecodeError as exc:
                    if len(buf) - pos > max_bytes:
                        raise JsonFormatError(f"{path}: element {index} at offset {start}: record longer than "
                                              f"{max_bytes:,} characters, the import limit (--max-record-bytes)") from None  # fmt: skip
                    if not fill():
                        raise JsonFormatError(
                            f"{path}: element {index} at offset {start}: not valid JSON ({exc.msg})"
                        ) from None
                    continue
                # A number cut at the chunk end ("1" of "1.5e10") decodes "successfully" but short:
                # read on while the number's characters run up to the end of the buffer.
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    tail = end
                    while tail < len(buf) and buf[tail] in _NUMBER_CHARS:
                        tail += 1
                    if tail == len(buf) and fill():
                        continue
                break
            if end - pos > max_bytes:
                raise JsonFormatError(f"{path}: element {index} at offset {start}: record longer than {max_bytes:,} "
                                      "characters, the import limit (--max-record-bytes)")  # fmt: skip
            if _SURROGATE_ESCAPE.search(buf, pos, end):
                refuse_unpaired_surrogates(value, f"{path}: element {index} at offset {start}")
            pos = end
            yield value
            index += 1
            sep = next_significant()
            if sep == ",":
                pos += 1
                next_significant()
                continue
            if sep == "]":
                end_of_array()
                return
            raise JsonFormatError(
                f"{path}: offset {consumed + pos}: expected ',' or ']' after element {index - 1}, "
                f"found {sep!r}" if sep else f"{path}: unexpected end of file inside the JSON array"
            )
