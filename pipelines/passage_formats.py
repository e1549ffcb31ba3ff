"""Passage corpora in the formats users bring: DPR's psgs_w100.tsv and BEIR's corpus.jsonl.

Both readers stream fixed-size Arrow batches (DPR's file has 21M rows) and name the file and
line of any malformed record. Positions are derived the way DPR laid out its file: consecutive
rows of one title are that article's passages in order.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from storage.atomic import atomic_text_file

DPR_TSV_HEADER = ["id", "text", "title"]
PASSAGE_COLUMNS = ["passage_id", "article_id", "title", "text", "position"]

csv.field_size_limit(sys.maxsize)  # DPR's rows are short, but BEIR-converted TSVs are not


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


def read_dpr_tsv(path: Path, batch_size: int = 50_000) -> Iterator[pa.RecordBatch]:
    """Stream DPR's `id<TAB>text<TAB>title` file (header required, csv quoting as DPR wrote it)."""
    positions = _Positions()
    rows: list[dict] = []
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t")
        header = next(reader, None)
        if header is None:
            raise PassageFormatError(f"{path}: empty file, expected a header {DPR_TSV_HEADER}")
        if [h.strip().lower() for h in header] != DPR_TSV_HEADER:
            raise PassageFormatError(f"{path}:1: expected the header {DPR_TSV_HEADER} (tab-separated), got {header!r}")
        for row in reader:
            if len(row) != 3:
                raise PassageFormatError(
                    f"{path}:{reader.line_num}: expected 3 tab-separated fields (id, text, title), got {len(row)}"
                )
            pid, text, title = row
            if not pid:
                raise PassageFormatError(f"{path}:{reader.line_num}: empty passage id")
            rows.append({"passage_id": pid, "article_id": None, "title": title, "text": text, "position": positions(title)})
            if len(rows) >= batch_size:
                yield _batch(rows)
                rows = []
    if rows:
        yield _batch(rows)


def read_beir_corpus(path: Path, batch_size: int = 50_000) -> Iterator[pa.RecordBatch]:
    """Stream a BEIR corpus.jsonl (`{"_id", "title", "text"}` per line); `path` may be its folder."""
    if path.is_dir():
        path = path / "corpus.jsonl"
    positions = _Positions()
    rows: list[dict] = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PassageFormatError(f"{path}:{line_no}: invalid JSON ({exc.msg})") from exc
            if not isinstance(record, dict) or "_id" not in record or "text" not in record:
                raise PassageFormatError(f"{path}:{line_no}: expected an object with '_id' and 'text'")
            title = str(record.get("title") or "")
            rows.append(
                {
                    "passage_id": str(record["_id"]),
                    "article_id": None,
                    "title": title,
                    "text": str(record["text"]),
                    "position": positions(title),
                }
            )
            if len(rows) >= batch_size:
                yield _batch(rows)
                rows = []
    if rows:
        yield _batch(rows)


def write_dpr_tsv(batches: Iterable[pa.RecordBatch], out: Path) -> int:
    """Write passages as DPR's psgs_w100.tsv (header `id text title`); returns rows written.

    Written to a temporary name and renamed, so an interrupted export never looks complete.
    """
    count = 0
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
                writer.writerow([pid, text, title])
                count += 1
    return count
