"""Write MediaWiki SQL dumps (page, categorylinks, linktarget, redirect) for the sample XML.

Why: the category-graph ingest reads the same ``page.sql.gz`` / ``categorylinks.sql.gz`` /
``linktarget.sql.gz`` files that Wikimedia publishes, so the sample ships them in the exact
mysqldump layout -- CREATE TABLE with the live column order, one ``INSERT INTO ... VALUES
(...),(...);`` line per batch, strings escaped the way mysqldump escapes them. Deriving them
from ``enwiki-sample-pages-articles.xml`` keeps the SQL graph identical to the XML graph:
every ``[[Category:...]]`` link of every page becomes one categorylinks row.

Two categorylinks layouts are written: the current one (MediaWiki 1.45: ``cl_target_id``
pointing into ``linktarget``, ``cl_collation_id``) as ``categorylinks.sql.gz`` and the older
one with ``cl_to`` as ``categorylinks-legacy.sql.gz``.

Standard library only. Usage: ``python sample/make_sql_dumps.py [XML] [OUT_DIR]``.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_XML = HERE / "wiki" / "enwiki-sample-pages-articles.xml"
NS_CATEGORY, NS_FILE, NS_TEMPLATE = 14, 6, 10
COLLATION_NAME, COLLATION_ID = "uppercase", 1
LINKTARGET_BASE = 1_000_000
DUMP_COMPLETED = "2025-07-02  4:17:33"

CATEGORY_LINK = re.compile(r"\[\[\s*category\s*:\s*([^\]|\n]+?)\s*(?:\|([^\]\n]*))?\]\]", re.IGNORECASE)
DEFAULTSORT = re.compile(r"\{\{\s*DEFAULTSORT\s*:\s*([^}]*?)\s*\}\}")
TEMPLATE_USE = re.compile(r"(?<!\{)\{\{(?!\{)\s*([^{}|#:\n<]+?)\s*(?=[|}\n])")
MAGIC_WORDS = {"PAGENAME", "PAGENAMEBASE", "NAMESPACE", "FULLPAGENAME", "!"}


@dataclass(frozen=True)
class XmlPage:
    page_id: int
    ns: int
    title: str  # full title, with namespace prefix
    redirect: str | None
    rev_id: int
    parent_id: int | None
    timestamp: datetime
    text: str

    @property
    def db_key(self) -> str:
        """page_title as stored: without the namespace prefix, spaces as underscores."""
        name = self.title.split(":", 1)[1] if self.ns else self.title
        return name.replace(" ", "_")

    @property
    def text_form(self) -> str:
        return self.db_key.replace("_", " ")


def read_pages(xml_path: Path) -> Iterator[XmlPage]:
    """Stream the pages of a MediaWiki export (any schema version) one at a time."""
    for _, elem in ET.iterparse(xml_path, events=("end",)):
        if elem.tag.rsplit("}", 1)[-1] != "page":
            continue
        fields = {child.tag.rsplit("}", 1)[-1]: child for child in elem}
        rev = {child.tag.rsplit("}", 1)[-1]: child for child in fields["revision"]}
        redirect = fields.get("redirect")
        parent = rev.get("parentid")
        yield XmlPage(
            page_id=int(fields["id"].text),
            ns=int(fields["ns"].text),
            title=fields["title"].text,
            redirect=redirect.get("title") if redirect is not None else None,
            rev_id=int(rev["id"].text),
            parent_id=int(parent.text) if parent is not None else None,
            timestamp=datetime.strptime(rev["timestamp"].text, "%Y-%m-%dT%H:%M:%SZ"),
            text=rev["text"].text or "",
        )
        elem.clear()


def normalize_title(raw: str) -> str:
    """MediaWiki title normalisation: underscores to spaces, squeeze spaces, capital first letter."""
    name = " ".join(raw.replace("_", " ").split())
    return name[:1].upper() + name[1:]


@dataclass(frozen=True)
class CategoryLink:
    category: str  # text form, no "Category:" prefix
    prefix: str  # cl_sortkey_prefix


def category_links(text: str) -> list[CategoryLink]:
    """The page's [[Category:...]] memberships in order, last sort key winning, as MediaWiki does."""
    default = DEFAULTSORT.search(text)
    default_prefix = default.group(1) if default else ""
    links: dict[str, CategoryLink] = {}
    for match in CATEGORY_LINK.finditer(text):
        name = normalize_title(match.group(1))
        prefix = match.group(2) if match.group(2) is not None else default_prefix
        links.pop(name, None)
        links[name] = CategoryLink(name, prefix)
    return list(links.values())


def templates_used(text: str) -> list[str]:
    names = []
    for match in TEMPLATE_USE.finditer(text):
        name = normalize_title(match.group(1))
        if name and name not in MAGIC_WORDS and not name.startswith(("Subst", "Safesubst")):
            names.append(name)
    return names


def sortkey(page: XmlPage, prefix: str) -> str:
    """cl_sortkey for the 'uppercase' collation: upper-cased "prefix\\ntitle" (or the title)."""
    key = f"{prefix.replace(chr(9), ' ')}\n{page.text_form}" if prefix else page.text_form
    return key.upper().encode("utf-8")[:230].decode("utf-8", "ignore")


def sql_string(value: str) -> str:
    """Quote a string the way mysqldump does (mysql_real_escape_string)."""
    out = (
        value.replace("\\", "\\\\")
        .replace("'", "\\'")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\x00", "\\0")
        .replace("\x1a", "\\Z")
    )
    return f"'{out}'"


def sql_value(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return sql_string(value)
    return str(value)


def _digest(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big")


HEADER = """-- MySQL dump 10.19  Distrib 10.11.11-MariaDB, for debian-linux-gnu (x86_64)
--
-- Host: localhost    Database: enwiki
-- ------------------------------------------------------
-- Server version	10.11.11-MariaDB-log

/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
/*!40101 SET @OLD_CHARACTER_SET_RESULTS=@@CHARACTER_SET_RESULTS */;
/*!40101 SET @OLD_COLLATION_CONNECTION=@@COLLATION_CONNECTION */;
/*!40101 SET NAMES utf8mb4 */;
/*!40103 SET @OLD_TIME_ZONE=@@TIME_ZONE */;
/*!40103 SET TIME_ZONE='+00:00' */;
/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */;
/*!40014 SET @OLD_FOREIGN_KEY_CHECKS=@@FOREIGN_KEY_CHECKS, FOREIGN_KEY_CHECKS=0 */;
/*!40101 SET @OLD_SQL_MODE=@@SQL_MODE, SQL_MODE='NO_AUTO_VALUE_ON_ZERO' */;
/*!40111 SET @OLD_SQL_NOTES=@@SQL_NOTES, SQL_NOTES=0 */;

--
-- Table structure for table `{table}`
--

DROP TABLE IF EXISTS `{table}`;
/*!40101 SET @saved_cs_client     = @@character_set_client */;
/*!40101 SET character_set_client = utf8mb4 */;
{create}
/*!40101 SET character_set_client = @saved_cs_client */;

--
-- Dumping data for table `{table}`
--

/*!40000 ALTER TABLE `{table}` DISABLE KEYS */;
"""

FOOTER = """/*!40000 ALTER TABLE `{table}` ENABLE KEYS */;
/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */;

/*!40101 SET SQL_MODE=@OLD_SQL_MODE */;
/*!40014 SET FOREIGN_KEY_CHECKS=@OLD_FOREIGN_KEY_CHECKS */;
/*!40014 SET UNIQUE_CHECKS=@OLD_UNIQUE_CHECKS */;
/*!40101 SET CHARACTER_SET_CLIENT=@OLD_CHARACTER_SET_CLIENT */;
/*!40101 SET CHARACTER_SET_RESULTS=@OLD_CHARACTER_SET_RESULTS */;
/*!40101 SET COLLATION_CONNECTION=@OLD_COLLATION_CONNECTION */;
/*!40111 SET SQL_NOTES=@OLD_SQL_NOTES */;

-- Dump completed on {completed}
"""

CREATE_PAGE = """CREATE TABLE `page` (
  `page_id` int(8) unsigned NOT NULL AUTO_INCREMENT,
  `page_namespace` int(11) NOT NULL DEFAULT 0,
  `page_title` varbinary(255) NOT NULL DEFAULT '',
  `page_is_redirect` tinyint(1) unsigned NOT NULL DEFAULT 0,
  `page_is_new` tinyint(1) unsigned NOT NULL DEFAULT 0,
  `page_random` double unsigned NOT NULL DEFAULT 0,
  `page_touched` binary(14) NOT NULL,
  `page_links_updated` varbinary(14) DEFAULT NULL,
  `page_latest` int(8) unsigned NOT NULL DEFAULT 0,
  `page_len` int(8) unsigned NOT NULL DEFAULT 0,
  `page_content_model` varbinary(32) DEFAULT NULL,
  `page_lang` varbinary(35) DEFAULT NULL,
  PRIMARY KEY (`page_id`),
  UNIQUE KEY `page_name_title` (`page_namespace`,`page_title`),
  KEY `page_random` (`page_random`),
  KEY `page_len` (`page_len`),
  KEY `page_redirect_namespace_len` (`page_is_redirect`,`page_namespace`,`page_len`)
) ENGINE=InnoDB AUTO_INCREMENT={auto} DEFAULT CHARSET=binary ROW_FORMAT=COMPRESSED;"""

CREATE_CATEGORYLINKS = """CREATE TABLE `categorylinks` (
  `cl_from` int(8) unsigned NOT NULL DEFAULT 0,
  `cl_sortkey` varbinary(230) NOT NULL DEFAULT '',
  `cl_timestamp` timestamp NOT NULL DEFAULT current_timestamp() ON UPDATE current_timestamp(),
  `cl_sortkey_prefix` varbinary(255) NOT NULL DEFAULT '',
  `cl_type` enum('page','subcat','file') NOT NULL DEFAULT 'page',
  `cl_collation_id` smallint(5) unsigned NOT NULL DEFAULT 0,
  `cl_target_id` bigint(20) unsigned NOT NULL,
  PRIMARY KEY (`cl_from`,`cl_target_id`),
  KEY `cl_timestamp_id` (`cl_target_id`,`cl_timestamp`),
  KEY `cl_sortkey_id` (`cl_target_id`,`cl_type`,`cl_sortkey`,`cl_from`)
) ENGINE=InnoDB DEFAULT CHARSET=binary ROW_FORMAT=COMPRESSED;"""

CREATE_CATEGORYLINKS_LEGACY = """CREATE TABLE `categorylinks` (
  `cl_from` int(8) unsigned NOT NULL DEFAULT 0,
  `cl_to` varbinary(255) NOT NULL DEFAULT '',
  `cl_sortkey` varbinary(230) NOT NULL DEFAULT '',
  `cl_timestamp` timestamp NOT NULL DEFAULT current_timestamp() ON UPDATE current_timestamp(),
  `cl_sortkey_prefix` varbinary(255) NOT NULL DEFAULT '',
  `cl_collation` varbinary(32) NOT NULL DEFAULT '',
  `cl_type` enum('page','subcat','file') NOT NULL DEFAULT 'page',
  PRIMARY KEY (`cl_from`,`cl_to`),
  KEY `cl_timestamp` (`cl_to`,`cl_timestamp`),
  KEY `cl_sortkey` (`cl_to`,`cl_type`,`cl_sortkey`,`cl_from`),
  KEY `cl_collation_ext` (`cl_collation`,`cl_to`,`cl_type`,`cl_from`)
) ENGINE=InnoDB DEFAULT CHARSET=binary ROW_FORMAT=COMPRESSED;"""

CREATE_LINKTARGET = """CREATE TABLE `linktarget` (
  `lt_id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `lt_namespace` int(11) NOT NULL,
  `lt_title` varbinary(255) NOT NULL,
  PRIMARY KEY (`lt_id`),
  UNIQUE KEY `lt_namespace_title` (`lt_namespace`,`lt_title`)
) ENGINE=InnoDB AUTO_INCREMENT={auto} DEFAULT CHARSET=binary;"""

CREATE_REDIRECT = """CREATE TABLE `redirect` (
  `rd_from` int(8) unsigned NOT NULL DEFAULT 0,
  `rd_namespace` int(11) NOT NULL DEFAULT 0,
  `rd_title` varbinary(255) NOT NULL DEFAULT '',
  `rd_interwiki` varbinary(32) DEFAULT NULL,
  `rd_fragment` varbinary(255) DEFAULT NULL,
  PRIMARY KEY (`rd_from`),
  KEY `rd_ns_title` (`rd_namespace`,`rd_title`,`rd_from`)
) ENGINE=InnoDB DEFAULT CHARSET=binary ROW_FORMAT=COMPRESSED;"""


def render_dump(table: str, create: str, rows: Sequence[Sequence[object]], batch: int) -> str:
    """A complete mysqldump file for one table, ``batch`` rows per INSERT statement."""
    parts = [HEADER.format(table=table, create=create)]
    for start in range(0, len(rows), batch):
        values = ",".join(
            "(" + ",".join(sql_value(v) for v in row) + ")" for row in rows[start : start + batch]
        )
        parts.append(f"INSERT INTO `{table}` VALUES {values};\n")
    parts.append(FOOTER.format(table=table, completed=DUMP_COMPLETED))
    return "".join(parts)


def _cl_type(page: XmlPage) -> str:
    return {NS_CATEGORY: "subcat", NS_FILE: "file"}.get(page.ns, "page")


def _db_ts(ts: datetime) -> str:
    return ts.strftime("%Y%m%d%H%M%S")


NAMESPACE_PREFIX = {"Category": NS_CATEGORY, "File": NS_FILE, "Template": NS_TEMPLATE}


def build_tables(pages: list[XmlPage]) -> dict[str, str]:
    """Render every dump from the parsed pages; returns file name -> SQL text."""
    page_rows, redirect_rows = [], []
    link_targets: dict[tuple[int, str], int] = {}

    def target_id(ns: int, key: str) -> int:
        return link_targets.setdefault((ns, key), LINKTARGET_BASE + 7 * (len(link_targets) + 1))

    memberships: list[tuple[XmlPage, CategoryLink]] = []
    for page in pages:
        h = _digest("page", page.page_id)
        touched = page.timestamp + timedelta(seconds=h % 86_400)
        page_rows.append(
            (
                page.page_id,
                page.ns,
                page.db_key,
                1 if page.redirect else 0,
                1 if page.parent_id is None else 0,
                float(f"0.{10**11 + h % (9 * 10**11)}"),
                _db_ts(touched),
                None if h % 17 == 0 else _db_ts(touched),
                page.rev_id,
                len(page.text.encode("utf-8")),
                "wikitext",
                None,
            )
        )
        for link in category_links(page.text):
            target_id(NS_CATEGORY, link.category.replace(" ", "_"))
            memberships.append((page, link))
        for name in templates_used(page.text):
            target_id(NS_TEMPLATE, name.replace(" ", "_"))
        if page.redirect:
            prefix, sep, rest = page.redirect.partition(":")
            ns = NAMESPACE_PREFIX.get(prefix, 0) if sep else 0
            title = rest if ns else page.redirect
            fragment = re.search(r"\[\[[^\]#|]*#([^\]|]+)", page.text)
            redirect_rows.append(
                (page.page_id, ns, title.replace(" ", "_"), "", fragment.group(1).strip() if fragment else "")
            )

    new_rows, legacy_rows = [], []
    for page, link in memberships:
        key = link.category.replace(" ", "_")
        ts = page.timestamp.strftime("%Y-%m-%d %H:%M:%S")
        sk = sortkey(page, link.prefix)
        new_rows.append(
            (
                page.page_id,
                sk,
                ts,
                link.prefix,
                _cl_type(page),
                COLLATION_ID,
                link_targets[(NS_CATEGORY, key)],
            )
        )
        legacy_rows.append((page.page_id, key, sk, ts, link.prefix, COLLATION_NAME, _cl_type(page)))
    new_rows.sort(key=lambda r: (r[0], r[6]))
    legacy_rows.sort(key=lambda r: (r[0], r[1].encode("utf-8")))
    lt_rows = sorted((lt, ns, title) for (ns, title), lt in link_targets.items())

    auto_page = max(p.page_id for p in pages) + 1
    return {
        "page.sql.gz": render_dump("page", CREATE_PAGE.format(auto=auto_page), page_rows, 50),
        "categorylinks.sql.gz": render_dump("categorylinks", CREATE_CATEGORYLINKS, new_rows, 120),
        "categorylinks-legacy.sql.gz": render_dump(
            "categorylinks", CREATE_CATEGORYLINKS_LEGACY, legacy_rows, 120
        ),
        "linktarget.sql.gz": render_dump(
            "linktarget", CREATE_LINKTARGET.format(auto=lt_rows[-1][0] + 1), lt_rows, 150
        ),
        "redirect.sql.gz": render_dump("redirect", CREATE_REDIRECT, redirect_rows, 100),
    }


def _write_gzip(path: Path, text: str) -> None:
    """Gzip with a fixed mtime and no file name, so rebuilding gives identical bytes."""
    tmp = path.with_name(path.name + ".tmp")
    with (
        open(tmp, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz,
    ):
        gz.write(text.encode("utf-8"))
    tmp.replace(path)


def write_dumps(xml_path: Path = DEFAULT_XML, out_dir: Path = HERE / "sql") -> list[Path]:
    pages = sorted(read_pages(xml_path), key=lambda p: p.page_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in build_tables(pages).items():
        path = out_dir / name
        _write_gzip(path, text)
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    xml_path = Path(argv[1]) if len(argv) > 1 else DEFAULT_XML
    out_dir = Path(argv[2]) if len(argv) > 2 else HERE / "sql"
    for path in write_dumps(xml_path, out_dir):
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
