"""The dump reader on tiny exports: .xml, .bz2, multistream, and damaged input."""

from __future__ import annotations

import bz2
import gzip
from pathlib import Path

import pytest

from odqa.pipelines.wikipedia import dump_reader
from odqa.pipelines.wikipedia.dump_reader import DumpError, iter_pages
from tests.wikipedia.dumps import Page, dump_bytes, write_bz2, write_multistream, write_xml

PAGES = [
    Page(
        10, "AccessibleComputing", "#REDIRECT [[Computer accessibility]]", redirect="Computer accessibility"
    ),
    Page(12, "Anarchism", "'''Anarchism''' is a [[political philosophy]] – ünïcödé.\n[[Category:Anarchism]]"),
    Page(13, "Empty page", None),
    Page(14, "Category:Political philosophy", "[[Category:Philosophy]]", ns=14),
    Page(15, "File:Flag.svg", "A flag. [[Category:Flags]]", ns=6),
    Page(16, "Tom & Jerry <show>", "Text with <ref>markup</ref> & entities &amp;nbsp;"),
]


def _summary(path: Path) -> list[tuple]:
    return [(p.page_id, p.title, p.namespace, p.redirect_target, p.text) for p in iter_pages(path)]


def test_xml_fields_and_offsets(tmp_path: Path) -> None:
    path = write_xml(tmp_path / "d.xml", PAGES)
    pages = list(iter_pages(path))
    assert [(p.page_id, p.title, p.namespace, p.redirect_target, p.text) for p in pages] == [
        (pg.page_id, pg.title, pg.ns, pg.redirect, pg.text) for pg in PAGES
    ]
    raw = path.read_bytes()
    for page in pages:  # byte_offset: the <page> start tag in the uncompressed stream
        assert raw[page.byte_offset : page.byte_offset + 6] == b"<page>"
        assert f"<id>{page.page_id}</id>".encode() in raw[page.byte_offset : page.byte_offset + 400]
    assert not any(p.invalid_utf8 for p in pages)


def test_bz2_and_multistream_read_the_same_pages(tmp_path: Path) -> None:
    expected = _summary(write_xml(tmp_path / "d.xml", PAGES))
    assert _summary(write_bz2(tmp_path / "d.xml.bz2", PAGES)) == expected
    multi = write_multistream(tmp_path / "m.xml.bz2", PAGES, pages_per_stream=2)
    assert multi.read_bytes().count(b"BZh") >= 4  # header + 3 page streams + footer
    assert _summary(multi) == expected


def test_compression_is_detected_by_content_not_name(tmp_path: Path) -> None:
    path = tmp_path / "dump.data"
    path.write_bytes(bz2.compress(dump_bytes(PAGES)))
    assert [p.page_id for p in iter_pages(path)] == [p.page_id for p in PAGES]


def test_small_read_blocks_split_characters_without_false_alarms(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(dump_reader, "READ_BLOCK", 7)  # splits multi-byte characters across blocks
    pages = list(iter_pages(write_bz2(tmp_path / "d.xml.bz2", PAGES)))
    assert [p.text for p in pages] == [p.text for p in PAGES]
    assert not any(p.invalid_utf8 for p in pages)


def test_namespace_and_redirect_fallbacks_for_old_dumps(tmp_path: Path) -> None:
    old = [
        Page(1, "Category:Things", "[[Category:Stuff]]", ns=None),
        Page(2, "Plain: a title with a colon", "Text.", ns=None),
        Page(3, "Old redirect", "#redirect [[Target page#Section|x]]"),
    ]
    pages = list(iter_pages(write_xml(tmp_path / "old.xml", old)))
    assert [p.namespace for p in pages] == [14, 0, 0]
    assert pages[2].redirect_target == "Target page"
    assert pages[0].redirect_target is None and pages[1].redirect_target is None


def test_page_without_text_has_none(tmp_path: Path) -> None:
    xml = dump_bytes([Page(1, "A", "x")]).replace(
        b'<text xml:space="preserve">x</text>', b'<text xml:space="preserve"></text>'
    )
    (tmp_path / "e.xml").write_bytes(xml)
    (page,) = iter_pages(tmp_path / "e.xml")
    assert page.text is None


def test_truncated_bz2_names_file_offset_and_last_page(tmp_path: Path) -> None:
    big = [Page(i, f"Page {i}", f"Words {i} " * 400) for i in range(1, 200)]
    data = bz2.compress(dump_bytes(big), compresslevel=1)  # 100 kB blocks: several in the file
    path = tmp_path / "cut.xml.bz2"
    path.write_bytes(data[: len(data) * 2 // 3])
    seen: list[int] = []
    with pytest.raises(DumpError) as err:
        for page in iter_pages(path):
            seen.append(page.page_id)
    message = str(err.value)
    assert str(path) in message and "truncated bz2" in message
    assert "compressed byte" in message and "uncompressed byte" in message
    assert seen, "pages before the damage are delivered"
    assert f"last complete page: 'Page {seen[-1]}' (id {seen[-1]})" in message


def test_truncated_multistream_at_stream_boundary_is_malformed_xml(tmp_path: Path) -> None:
    path = write_multistream(tmp_path / "m.xml.bz2", PAGES, pages_per_stream=2)
    streams = path.read_bytes().split(b"BZh9")[1:]
    (tmp_path / "cut.xml.bz2").write_bytes(b"".join(b"BZh9" + s for s in streams[:2]))
    with pytest.raises(
        DumpError, match=r"cut\.xml\.bz2: malformed XML .*last complete page: 'Anarchism' \(id 12\)"
    ):
        list(iter_pages(tmp_path / "cut.xml.bz2"))


def test_other_compression_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "d.xml.gz"
    path.write_bytes(gzip.compress(dump_bytes(PAGES)))
    with pytest.raises(DumpError, match=r"d\.xml\.gz: gzip-compressed file; expected MediaWiki XML"):
        list(iter_pages(path))


def test_not_bz2_after_magic(tmp_path: Path) -> None:
    path = tmp_path / "bad.xml.bz2"
    path.write_bytes(b"BZh9" + b"\x00" * 100)
    with pytest.raises(DumpError, match=r"bad\.xml\.bz2: invalid bz2 data .*no page was read completely"):
        list(iter_pages(path))


def test_malformed_xml_names_file_line_and_last_page(tmp_path: Path) -> None:
    xml = dump_bytes(PAGES).replace(b"<title>Empty page</title>", b"<title>Empty page</titel>")
    path = tmp_path / "bad.xml"
    path.write_bytes(xml)
    seen = []
    with pytest.raises(DumpError) as err:
        for page in iter_pages(path):
            seen.append(page.page_id)
    assert seen == [10, 12]
    message = str(err.value)
    assert str(path) in message and "malformed XML (mismatched tag, line" in message
    assert "last complete page: 'Anarchism' (id 12)" in message


def test_invalid_utf8_is_repaired_and_the_page_flagged(tmp_path: Path) -> None:
    xml = dump_bytes(PAGES).replace("ünïcödé".encode(), b"caf\xe9 \xff\xfe bad")
    path = tmp_path / "latin1.xml.bz2"
    path.write_bytes(bz2.compress(xml))
    pages = {p.page_id: p for p in iter_pages(path)}
    assert pages[12].invalid_utf8
    assert "caf\ufffd \ufffd\ufffd bad" in pages[12].text
    assert [pid for pid, p in pages.items() if p.invalid_utf8] == [12]


def test_file_ending_inside_a_character_is_malformed(tmp_path: Path) -> None:
    path = tmp_path / "cut.xml"
    path.write_bytes(dump_bytes(PAGES)[:-30] + "ü".encode()[:1])
    with pytest.raises(DumpError, match=r"cut\.xml: malformed XML"):
        list(iter_pages(path))
