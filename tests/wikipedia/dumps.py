"""Build small MediaWiki XML exports for the reader and ingest tests."""

from __future__ import annotations

import bz2
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

HEADER = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <namespaces>
      <namespace key="0" case="first-letter" />
      <namespace key="6" case="first-letter">File</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""
FOOTER = "</mediawiki>\n"


@dataclass
class Page:
    page_id: int
    title: str
    text: str | None = "Some text."
    ns: int | None = 0
    redirect: str | None = None

    def xml(self) -> str:
        ns = f"    <ns>{self.ns}</ns>\n" if self.ns is not None else ""
        redirect = f"    <redirect title={quoteattr(self.redirect)} />\n" if self.redirect else ""
        text = (
            '      <text bytes="0" />\n'
            if self.text is None
            else f'      <text xml:space="preserve">{escape(self.text)}</text>\n'
        )
        return (
            f"  <page>\n    <title>{escape(self.title)}</title>\n{ns}    <id>{self.page_id}</id>\n{redirect}"
            f"    <revision>\n      <id>{self.page_id * 10}</id>\n"
            f"      <contributor><username>x</username><id>7</id></contributor>\n{text}"
            f"    </revision>\n  </page>\n"
        )


def dump_bytes(pages: list[Page]) -> bytes:
    return (HEADER + "".join(p.xml() for p in pages) + FOOTER).encode("utf-8")


def write_xml(path: Path, pages: list[Page]) -> Path:
    path.write_bytes(dump_bytes(pages))
    return path


def write_bz2(path: Path, pages: list[Page]) -> Path:
    path.write_bytes(bz2.compress(dump_bytes(pages)))
    return path


def write_multistream(path: Path, pages: list[Page], pages_per_stream: int = 2) -> Path:
    """Like Wikimedia's multistream dumps: header, groups of pages, footer, each its own stream."""
    parts = [HEADER.encode()]
    for i in range(0, len(pages), pages_per_stream):
        parts.append("".join(p.xml() for p in pages[i : i + pages_per_stream]).encode())
    parts.append(FOOTER.encode())
    path.write_bytes(b"".join(bz2.compress(part) for part in parts))
    return path
