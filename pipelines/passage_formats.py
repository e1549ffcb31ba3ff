"""Passage corpora in the formats users bring: DPR's psgs_w100.tsv and BEIR's corpus.jsonl.

Both readers stream fixed-size Arrow batches (DPR's file has 21M rows), read each line with a
bounded length (`MAX_RECORD_BYTES`) and refuse any malformed record naming the file and line.
A refusal never quotes the record: it says where (file, line, byte) and what was expected, so a
file that should not have been read (a secret behind a link) never reaches a log. Positions are
derived the way DPR laid out its file: consecutive rows of one title are that article's passages
in order.
"""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from ..storage.atomic import atomic_text_file
from ..storage.ids import check_passage_id
from .questions.jsonstream import BOM, JsonFormatError, decode_json_line, title_text
from .tsv_lines import Quoting, TsvLineError, tsv_fields

DPR_TSV_HEADER = ["id", "text", "title"]
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
PASSAGE_COLUMNS = ["passage_id", "article_id", "title", "text", "position"]

# The longest record an import accepts (a line of the file). DPR's passages are ~100 words; the
# limit keeps a malformed file (one huge line) from costing gigabytes of memory.
MAX_RECORD_BYTES = 1 << 20


class PassageFormatError(ValueError):
    """A malformed passage record; the message names the file and line."""


def _batch(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        rows,
        schema=pa.schema(
            [
                ("passage_id", pa.string()),
                ("article_id", pa.int64()),
                ("title", pa.string()),
                ("text", pa.string()),
                ("position", pa.int32()),
            ]
        ),
    )


class _Positions:
    """Running passage index within consecutive rows of the same title."""

    def __init__(self) -> None:
        self._title: str | None = None
        self._next = 0

    def __call__(self, title: str) -> int:
        if title != self._title:
            self._title, self._next = title, 0
        position, self._next = self._next, self._next + 1
        return position


# The first bytes of the compressed files a passage corpus ships as (DPR's psgs_w100.tsv.gz).
_COMPRESSED_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ": "xz", b"PK\x03\x04": "zip"}


def _refuse_compressed(path: Path, first: bytes) -> None:
    """Refuse a compressed file by its first bytes: passages are read uncompressed, and without
    this check DPR's psgs_w100.tsv.gz was refused as 'not UTF-8 at byte 2', which hides why."""
    for magic, kind in _COMPRESSED_MAGIC.items():
        if first.startswith(magic) and (kind != "bz2" or first[4:10] == b"1AY&SY"):
            raise PassageFormatError(
                f"{path}: a {kind}-compressed file (its first bytes are {kind}'s); passage files are read "
                "uncompressed: decompress it first (gunzip -k, bunzip2 -k, unxz -k, unzip; `odqa fetch` unpacks DPR's psgs_w100.tsv.gz)"
            )


def _lines(path: Path, max_bytes: int, opened: BinaryIO | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, read in binary with a bounded length and decoded here, so
    that an over-long record costs at most `max_bytes` of memory and a bad byte names its line.
    `opened`: the file already open (a caller that checked what it opened); `path` then only names it."""
    with nullcontext(opened) if opened is not None else open(path, "rb") as handle:
        for number in itertools.count(1):
            raw = handle.readline(max_bytes + 2)
            if not raw:
                return
            if number == 1:
                _refuse_compressed(path, raw)
            if len(raw.rstrip(b"\r\n")) > max_bytes:
                raise PassageFormatError(
                    f"{path}:{number}: record longer than {max_bytes:,} bytes, the import limit "
                    "(--max-record-bytes); is this the right file and format?"
                )
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PassageFormatError(
                    f"{path}:{number}: not UTF-8 (at byte {exc.start + 1} of the line); "
                    "passage files must be UTF-8"
                ) from None


def _dpr_fields(path: Path, number: int, line: str, quoting: Quoting) -> list[str]:
    """The fields of one DPR TSV line as DPR's csv.reader reads them (`tsv_lines`); a record
    never continues on the next line. A byte order mark before the header is the file's, not text."""
    try:
        return tsv_fields(line.removeprefix(BOM) if number == 1 else line, quoting)
    except TsvLineError as exc:
        raise PassageFormatError(f"{path}:{number}: {exc}") from None


def read_dpr_tsv(path: Path, batch_size: int = 50_000, max_record_bytes: int = MAX_RECORD_BYTES,
                 opened: BinaryIO | None = None, quoting: Quoting = "csv") -> Iterator[pa.RecordBatch]:  # fmt: skip
    """Stream DPR's `id<TAB>text<TAB>title` file (header required), each line read into the fields
    DPR's `csv.reader(f, delimiter="\\t")` reads (`quoting="none"`: split at tabs only).

    Every record is one line of three fields: a quote left open, a wrong field count, bytes that
    are not UTF-8, a line over `max_record_bytes` and a file without passages are refused with the
    file and line, never merged or skipped. `opened`: the file already open (`path` names it).
    """
    positions = _Positions()
    rows: list[dict] = []
    lines = _lines(path, max_record_bytes, opened)
    first = next(lines, None)
    if first is None:
        raise PassageFormatError(f"{path}: empty file, expected a header {DPR_TSV_HEADER}")
    header = _dpr_fields(path, *first, quoting)
    if [h.strip().lower() for h in header] != DPR_TSV_HEADER:
        raise PassageFormatError(f"{path}:1: expected the header {DPR_TSV_HEADER} (tab-separated), got another first "
                                 f"line ({len(header)} field{'s' if len(header) != 1 else ''})")  # fmt: skip
    count = 0
    for number, line in lines:
        if not line.strip():
            raise PassageFormatError(f"{path}:{number}: empty line, expected id, text, title")
        row = _dpr_fields(path, number, line, quoting)
        if len(row) != 3:
            raise PassageFormatError(
                f"{path}:{number}: expected 3 tab-separated fields (id, text, title), got {len(row)}"
            )
        pid, text, title = row
        check_passage_id(pid, f"{path}:{number}")
        rows.append({"passage_id": pid, "article_id": None, "title": title, "text": text, "position": positions(title)})
        count += 1
        if len(rows) >= batch_size:
            yield _batch(rows)
            rows = []
    if not count:
        raise PassageFormatError(f"{path}: no passages after the header")
    if rows:
        yield _batch(rows)


def read_beir_corpus(path: Path, batch_size: int = 50_000, max_record_bytes: int = MAX_RECORD_BYTES,
                     opened: BinaryIO | None = None) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """Stream a BEIR corpus.jsonl (`{"_id", "title", "text"}` per line); `path` may be its folder.

    The same limits as `read_dpr_tsv`: bad JSON or UTF-8, an over-long line and a file without
    passages are refused with the file and line. `opened`: the corpus.jsonl already open (`path` names it).
    """
    if path.is_dir():  # (with `opened`, only to name the file)
        path = path / "corpus.jsonl"
    positions = _Positions()
    rows: list[dict] = []
    count = 0
    for line_no, line in _lines(path, max_record_bytes, opened):
        if not line.strip():
            continue
        try:
            record = decode_json_line(line, path, line_no)
        except JsonFormatError as exc:
            raise PassageFormatError(str(exc)) from None
        if not isinstance(record, dict) or "_id" not in record or not isinstance(record.get("text"), str):
            raise PassageFormatError(f"{path}:{line_no}: expected an object with '_id' and 'text' (a string)")
        passage_id = check_passage_id(record["_id"], f"{path}:{line_no}")
        try:
            title = title_text(record.get("title"), f"{path}:{line_no}")
        except JsonFormatError as exc:
            raise PassageFormatError(str(exc)) from None
        rows.append(
            {
                "passage_id": passage_id,
                "article_id": None,
                "title": title,
                "text": record["text"],
                "position": positions(title),
            }
        )
        count += 1
        if len(rows) >= batch_size:
            yield _batch(rows)
            rows = []
    if not count:
        raise PassageFormatError(f"{path}: no passages (an empty corpus)")
    if rows:
        yield _batch(rows)


@dataclass(frozen=True)
class DprTsvWritten:
    """What `write_dpr_tsv` wrote: passages, and how many had a line break turned into a space."""

    passages: int
    line_breaks_as_spaces: int


def _one_line(field: str | None) -> str | None:
    """`field` with each line break (`\\r\\n`, `\\r`, `\\n`) a space (the same object when it has none)."""
    if field is None or ("\n" not in field and "\r" not in field):
        return field
    return _LINE_BREAK.sub(" ", field)


def write_dpr_tsv(batches: Iterable[pa.RecordBatch], out: Path) -> DprTsvWritten:
    """Write passages as DPR's psgs_w100.tsv (header `id text title`), one passage a line.

    A line break in a text or title (BEIR and DPR-JSON passages may hold one) is written as a
    space: csv quoting would spread the record over several lines, which odqa's reader refuses
    (a record is one line, `tsv_lines`) and line-based tools (`wc -l`, `split`, `shuf`) cut
    apart. Lucene's analyzers and BERT-style tokenizers treat both alike as whitespace, so the
    passage is retrieved the same. Written to a temporary name and renamed, so an interrupted
    export never looks complete.
    """
    count = flattened = 0
    with atomic_text_file(out, newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(DPR_TSV_HEADER)
        for batch in batches:
            for pid, text, title in zip(
                batch.column("passage_id").to_pylist(),
                batch.column("text").to_pylist(),
                batch.column("title").to_pylist(),
                strict=True,
            ):
                line_text, line_title = _one_line(text), _one_line(title)
                flattened += line_text is not text or line_title is not title
                writer.writerow([pid, line_text, line_title])
                count += 1
    return DprTsvWritten(passages=count, line_breaks_as_spaces=flattened)
