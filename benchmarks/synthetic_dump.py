"""Grow a real MediaWiki export to any size by repeating its pages under fresh ids.

Used by the ingest benchmarks to show that memory does not grow with the dump and to measure
throughput once the worker pool has started. Each copy keeps the real wikitext; only page
ids (offset by ``copy * ID_STRIDE``) and titles (suffixed " (copy N)") change, so the result
is a valid export with unique pages. Written uncompressed: compressing 1 GB with bz2 would
take minutes and change nothing about the memory profile of the pipeline.

From a terminal: ``python benchmarks/synthetic_dump.py SOURCE OUT --target-bytes N`` (SOURCE
plain or bz2-compressed XML; OUT is written uncompressed).
"""

from __future__ import annotations

import argparse
import bz2
import re
from pathlib import Path

ID_STRIDE = 100_000_000
_PAGE = re.compile(rb"  <page>\n.*?</page>\n", re.DOTALL)
_PAGE_ID = re.compile(rb"(<ns>[^<]*</ns>\s*<id>)(\d+)(</id>)")
_TITLE = re.compile(rb"<title>([^<]*)</title>")


def split_export(xml: bytes) -> tuple[bytes, list[bytes], bytes]:
    """(header up to the first page, the pages, footer after the last page)."""
    pages = [m.group() for m in _PAGE.finditer(xml)]
    first = xml.index(pages[0])
    last = xml.rindex(pages[-1]) + len(pages[-1])
    return xml[:first], pages, xml[last:]


def renumber(page: bytes, copy: int) -> bytes:
    """The page as its ``copy``-th copy: page id + ``copy * ID_STRIDE``, title suffixed."""
    page = _PAGE_ID.sub(
        lambda m: m.group(1) + str(int(m.group(2)) + copy * ID_STRIDE).encode() + m.group(3), page, count=1
    )
    return _TITLE.sub(lambda m: b"<title>" + m.group(1) + b" (copy %d)</title>" % copy, page, count=1)


def write_repeated(source: Path, out: Path, target_bytes: int, min_copies: int = 1) -> tuple[int, int]:
    """Write copies of ``source``'s pages to ``out`` until it holds >= ``target_bytes`` of XML
    and at least ``min_copies`` copies. Returns (copies, bytes written)."""
    raw = source.read_bytes()
    xml = bz2.decompress(raw) if raw[:3] == b"BZh" else raw
    header, pages, footer = split_export(xml)
    written = 0
    copies = 0
    with out.open("wb") as f:
        f.write(header)
        written += len(header)
        while copies < min_copies or written < target_bytes:
            for page in pages:
                if copies:
                    page = renumber(page, copies)
                f.write(page)
                written += len(page)
            copies += 1
        f.write(footer)
        written += len(footer)
    return copies, written


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source", type=Path, help="a MediaWiki export, .xml or .xml.bz2")
    parser.add_argument("out", type=Path, help="the grown export, uncompressed XML")
    parser.add_argument("--target-bytes", type=int, required=True, help="at least this many bytes of XML")
    parser.add_argument("--min-copies", type=int, default=1, help="at least this many copies of the pages")
    args = parser.parse_args()
    copies, written = write_repeated(args.source, args.out, args.target_bytes, args.min_copies)
    print(f"{args.out}: {copies} copies, {written} bytes")


if __name__ == "__main__":
    main()
