"""The mysqldump reader on real-format snippets: exact values, chunk boundaries, corruption."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pytest

from odqa.pipelines.categories.sql_dump import SqlDumpError, SqlDumpReader, dump_columns
from tests.categories.dumps import CATEGORYLINKS_LEGACY_HEADER, PAGE_HEADER, write_dump

LINKS = pa.schema(
    [
        ("cl_from", pa.int64()),
        ("cl_to", pa.string()),
        ("cl_sortkey", pa.binary()),
        ("cl_sortkey_prefix", pa.string()),
        ("cl_type", pa.string()),
    ]
)

# Escapes as mysqldump writes them: \' \\ \n \r \0 \" \Z, commas/parentheses inside strings,
# NULL, multi-byte UTF-8 (2, 3 and 4 bytes), an empty string, `_binary` introducer.
TRICKY_VALUES = (
    b"(10,'Redirects_from_moves','ACCESSIBLECOMPUTING','2014-10-26 04:50:23','','uppercase','page'),"
    b"(12,'It\\'s_(a),_test;_really','X\\\\Y','2014-10-26 04:50:23',NULL,'uppercase','subcat'),"
    b"(13,'M\xc3\xbcnchen_\xe6\x9d\xb1\xe4\xba\xac_\xf0\x9f\x98\x80','a\\nb\\0c\\rd\\Ze\\\"f','2014-10-26 04:50:23','','uppercase','page'),"
    b"(14,'Ends_with_backslash\\\\',_binary 'raw\\'key','2014-10-26 04:50:23','x),(y','uppercase','file');\n"
)
TRICKY_ROWS = [
    (10, "Redirects_from_moves", b"ACCESSIBLECOMPUTING", "", "page"),
    (12, "It's_(a),_test;_really", b"X\\Y", None, "subcat"),
    (13, "München_東京_😀", b'a\nb\x00c\rd\x1ae"f', "", "page"),
    (14, "Ends_with_backslash\\", b"raw'key", "x),(y", "file"),
]


def test_reads_escapes_nulls_and_utf8_exactly(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "cl.sql", CATEGORYLINKS_LEGACY_HEADER, [TRICKY_VALUES])
    reader = SqlDumpReader(path, table="categorylinks", columns=LINKS)
    assert list(reader.rows()) == TRICKY_ROWS
    assert reader.stats.rows == 4 and reader.stats.statements == 1


@pytest.mark.parametrize("chunk_size", [7, 64, 333])
def test_chunk_boundaries_anywhere_give_the_same_rows(tmp_path: Path, chunk_size: int) -> None:
    """Tiny chunks cut tuples, strings and escape sequences at every possible byte."""
    path = write_dump(tmp_path / "cl.sql.gz", CATEGORYLINKS_LEGACY_HEADER, [TRICKY_VALUES, TRICKY_VALUES])
    reader = SqlDumpReader(path, columns=LINKS, chunk_size=chunk_size)
    assert list(reader.rows()) == TRICKY_ROWS * 2
    assert reader.stats.statements == 2


def test_column_names_from_create_table_and_defaults(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "cl.sql", CATEGORYLINKS_LEGACY_HEADER, [TRICKY_VALUES])
    assert dump_columns(path, "categorylinks") == [
        "cl_from", "cl_to", "cl_sortkey", "cl_timestamp", "cl_sortkey_prefix", "cl_collation", "cl_type",
    ]  # fmt: skip
    assert dump_columns(path, "page") is None
    rows = list(SqlDumpReader(path, columns=["cl_from", "cl_type"]).rows())
    assert rows == [(10, "page"), (12, "subcat"), (13, "page"), (14, "file")]


def test_insert_with_column_list_and_no_create_table(tmp_path: Path) -> None:
    path = tmp_path / "x.sql"
    path.write_bytes(
        b"INSERT INTO `t` (`a`, `b`) VALUES (1,'x'),(2,NULL);\nINSERT INTO `t` VALUES (3,'y');\n"
    )
    reader = SqlDumpReader(path, columns=pa.schema([("b", pa.string()), ("a", pa.int64())]))
    rows = []
    with pytest.raises(SqlDumpError, match="no CREATE TABLE"):
        rows.extend(reader.rows())
    assert rows == [("x", 1), (None, 2)]
    # Without requested names, the field count comes from the first tuple; without a CREATE
    # TABLE there are no types, so values stay text.
    assert list(SqlDumpReader(path).rows()) == [("1", "x"), ("2", None), ("3", "y")]


def test_other_tables_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "x.sql"
    path.write_bytes(
        PAGE_HEADER
        + b"INSERT INTO `page` VALUES (1,0,'A',0,0,0.5,'20240101000000',NULL,1,10,'wikitext',NULL);\n"
        b"INSERT INTO `other` VALUES (1),(2);\n"
    )
    assert [r[0] for r in SqlDumpReader(path, table="page").rows()] == [1]


def test_page_dump_types(tmp_path: Path) -> None:
    path = write_dump(
        tmp_path / "page.sql.gz",
        PAGE_HEADER,
        [b"(10,0,'AccessibleComputing',1,0,0.856935107283,'20240101000000','20240102000000',1219062925,111,'wikitext',NULL),"
         b"(12,14,'Anarchism',0,0,0.786172332974311,'20240101000000',NULL,1219062926,110449,'wikitext',NULL);\n"],
    )  # fmt: skip
    rows = list(
        SqlDumpReader(
            path,
            columns=[
                "page_id",
                "page_namespace",
                "page_title",
                "page_is_redirect",
                "page_random",
                "page_lang",
            ],
        ).rows()
    )
    assert rows == [
        (10, 0, "AccessibleComputing", 1, 0.856935107283, None),
        (12, 14, "Anarchism", 0, 0.786172332974311, None),
    ]


def _corrupt_dump(tmp_path: Path) -> tuple[Path, int]:
    good = b"(1,'A','k','2014-10-26 04:50:23','','uppercase','page'),(2,'B','k','2014-10-26 04:50:23','','uppercase','page');\n"
    bad = b"(3,'C','k','2014-10-26 04:50:23','','uppercase','page'),(4,'D' oops,'k','t','','u','page'),(5,'E','k','t','','u','page');\n"
    path = write_dump(tmp_path / "cl.sql", CATEGORYLINKS_LEGACY_HEADER, [good, bad, good])
    data = path.read_bytes()
    return path, data.index(b"(4,'D' oops")


def test_corrupt_statement_raises_with_byte_offset(tmp_path: Path) -> None:
    path, offset = _corrupt_dump(tmp_path)
    reader = SqlDumpReader(path, columns=["cl_from"])
    seen = []
    with pytest.raises(SqlDumpError) as info:
        seen.extend(r[0] for r in reader.rows())
    assert info.value.offset == offset
    assert f"byte {offset}" in str(info.value) and str(path) in str(info.value)
    assert seen == [1, 2, 3]  # everything before the damage was delivered


def test_corrupt_statement_skipped_and_counted(tmp_path: Path) -> None:
    path, offset = _corrupt_dump(tmp_path)
    reader = SqlDumpReader(path, columns=["cl_from"], skip_bad=True, chunk_size=50)
    assert [r[0] for r in reader.rows()] == [1, 2, 3, 1, 2]
    assert reader.stats.skipped_statements == 1
    assert reader.stats.bad_offsets == [offset]


def test_truncated_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.sql"
    whole = CATEGORYLINKS_LEGACY_HEADER + b"INSERT INTO `categorylinks` VALUES " + TRICKY_VALUES
    path.write_bytes(whole[: whole.index(b"(13,") + 20])
    reader = SqlDumpReader(path, columns=["cl_from"])
    with pytest.raises(SqlDumpError, match="truncated"):
        list(reader.rows())


def test_truncated_gzip_is_an_error_with_offset(tmp_path: Path) -> None:
    whole = write_dump(tmp_path / "cl.sql.gz", CATEGORYLINKS_LEGACY_HEADER, [TRICKY_VALUES] * 50).read_bytes()
    cut = tmp_path / "cut.sql.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(SqlDumpError, match=r"cut\.sql\.gz: byte \d+: cannot read the file"):
        list(SqlDumpReader(cut, columns=["cl_from"], chunk_size=64).rows())


def test_invalid_utf8_raises_or_skips_the_row(tmp_path: Path) -> None:
    values = b"(1,'ok','k','t','','u','page'),(2,'bad\xff\xfe','k','t','','u','page'),(3,'fine','k','t','','u','page');\n"
    path = write_dump(tmp_path / "cl.sql", CATEGORYLINKS_LEGACY_HEADER, [values])
    with pytest.raises(SqlDumpError, match="invalid UTF-8") as info:
        list(SqlDumpReader(path, columns=["cl_from", "cl_to"]).rows())
    assert info.value.offset == path.read_bytes().index(b"'bad")
    reader = SqlDumpReader(path, columns=["cl_from", "cl_to"], skip_bad=True)
    assert list(reader.rows()) == [(1, "ok"), (3, "fine")]
    assert reader.stats.skipped_rows == 1
    # The invalid bytes are in a column not requested as text: no problem.
    assert [r[0] for r in SqlDumpReader(path, columns=["cl_from"]).rows()] == [1, 2, 3]


def test_non_number_in_integer_column(tmp_path: Path) -> None:
    values = b"(1,'a','k','t','','u','page'),(x2,'b','k','t','','u','page');\n"
    path = write_dump(tmp_path / "cl.sql", CATEGORYLINKS_LEGACY_HEADER, [values])
    with pytest.raises(SqlDumpError, match="cl_from"):
        list(SqlDumpReader(path, columns=["cl_from"]).rows())


def test_gzip_and_plain_read_the_same(tmp_path: Path) -> None:
    plain = write_dump(tmp_path / "a.sql", CATEGORYLINKS_LEGACY_HEADER, [TRICKY_VALUES])
    packed = tmp_path / "a.sql.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert list(SqlDumpReader(plain, columns=LINKS).rows()) == list(
        SqlDumpReader(packed, columns=LINKS).rows()
    )
