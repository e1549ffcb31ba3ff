"""Build the bundled sample data set from its hand-written sources.

Why this script exists: the sample is used by the demo and by the end-to-end tests of every
part of odqa (Wikipedia ingest, category graph, Wikidata questions, PAQ sampling, QA imports),
so its files must agree with each other exactly: page ids in the XML dump, the SQL dumps and
the PAQ passage ids; article titles and Wikidata labels; answers and article text. The prose
itself is written by hand in ``sample/wiki/src/*.wiki`` and the facts and questions are listed
once, in ``sample/sample_facts.py``. Everything else (XML export, ``.bz2``, RDF, JSON Lines, QA files, SQL dumps) is generated here,
so a change to one source cannot leave the others stale.

Usage::

    python sample/build_sample.py          # regenerate every derived file in place
    python sample/build_sample.py --check  # rebuild into a temporary folder, compare, exit 1 on drift

Requires ``mwparserfromhell`` (a project dependency) only for the approximate plain-text view
used to place PAQ answer offsets; the SQL dumps are produced by the stdlib-only
``make_sql_dumps.py`` from the XML.
"""

from __future__ import annotations

import argparse
import bz2
import filecmp
import hashlib
import html
import importlib.util
import json
import re
import sys
import tempfile
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

SAMPLE_DIR = Path(__file__).resolve().parent
SRC_DIR = SAMPLE_DIR / "wiki" / "src"
XML_NAME = "wiki/enwiki-sample-pages-articles.xml"


def _load_module(name: str, filename: str) -> types.ModuleType:
    """Load a sibling module by path, so this file works as a script and when imported by tests."""
    spec = importlib.util.spec_from_file_location(name, SAMPLE_DIR / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    return module


facts = _load_module("odqa_sample_facts", "sample_facts.py")

EXPORT_NS = "http://www.mediawiki.org/xml/export-0.11/"
NAMESPACES = [
    (-2, "Media"),
    (-1, "Special"),
    (0, ""),
    (1, "Talk"),
    (2, "User"),
    (3, "User talk"),
    (4, "Wikipedia"),
    (5, "Wikipedia talk"),
    (6, "File"),
    (7, "File talk"),
    (8, "MediaWiki"),
    (9, "MediaWiki talk"),
    (10, "Template"),
    (11, "Template talk"),
    (12, "Help"),
    (13, "Help talk"),
    (14, "Category"),
    (15, "Category talk"),
    (100, "Portal"),
    (101, "Portal talk"),
    (118, "Draft"),
    (119, "Draft talk"),
    (710, "TimedText"),
    (711, "TimedText talk"),
    (828, "Module"),
    (829, "Module talk"),
]
NS_BY_PREFIX = {name: key for key, name in NAMESPACES if key > 0}

PAGE_HEADER = re.compile(r"^@@@ page (\d+) \| (.+)$")
REDIRECT_RE = re.compile(r"^#redirect\s*\[\[\s*([^\]|#]+)(#[^\]|]*)?", re.IGNORECASE)

# Invented editors (no real accounts); IPs come from the documentation ranges of RFC 5737.
CONTRIBUTORS = [
    ("Quillwright", 41820377),
    ("Harbour Archivist", 30511942),
    ("Stellar Ledger", 45977201),
    ("Pennant Clerk", 38264410),
    ("Tidewater Editor", 27731958),
    ("Rowan Catalogue", 44102863),
    ("203.0.113.24", None),
    ("198.51.100.7", None),
]
COMMENTS = [
    "copyedit",
    "/* History */ tighten wording",
    "add citation",
    "update infobox",
    "fix category",
    "/* References */ tidy reference formatting",
    "link fixes",
    "Reverted edits by [[Special:Contributions/203.0.113.24|203.0.113.24]] to last version",
    None,
]


@dataclass(frozen=True)
class Page:
    """One page of the export: id, full title (with namespace prefix) and wikitext."""

    page_id: int
    title: str
    text: str

    @property
    def ns(self) -> int:
        prefix, sep, _ = self.title.partition(":")
        return NS_BY_PREFIX.get(prefix, 0) if sep else 0

    @property
    def redirect_target(self) -> str | None:
        match = REDIRECT_RE.match(self.text)
        if not match:
            return None
        target = match.group(1).strip().lstrip(":")
        return target[0].upper() + target[1:]


def read_sources(src_dir: Path = SRC_DIR) -> list[Page]:
    """Read every ``@@@ page ID | Title`` block of the ``*.wiki`` sources, sorted by page id."""
    pages: list[Page] = []
    for path in sorted(src_dir.glob("*.wiki")):
        current: tuple[int, str] | None = None
        lines: list[str] = []
        for lineno, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
            header = PAGE_HEADER.match(line)
            if header:
                if current:
                    pages.append(Page(current[0], current[1], "\n".join(lines).strip("\n")))
                current, lines = (int(header.group(1)), header.group(2).strip()), []
            elif current is None and line.strip():
                raise ValueError(f"{path}:{lineno}: text before the first '@@@ page' header")
            else:
                lines.append(line)
        if current:
            pages.append(Page(current[0], current[1], "\n".join(lines).strip("\n")))
    pages.sort(key=lambda p: p.page_id)
    ids = [p.page_id for p in pages]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate page ids in sample/wiki/src")
    titles = [p.title for p in pages]
    if len(set(titles)) != len(titles):
        raise ValueError("duplicate titles in sample/wiki/src")
    return pages


def _digest(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big")


def mediawiki_sha1(text: str) -> str:
    """SHA-1 of the text in base 36, padded to 31 characters, as MediaWiki stores it."""
    value = int(hashlib.sha1(text.encode("utf-8")).hexdigest(), 16)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while value:
        value, rem = divmod(value, 36)
        out = digits[rem] + out
    return out.rjust(31, "0")


@dataclass(frozen=True)
class Revision:
    """Deterministic revision metadata (ids, time, editor) derived from the page id."""

    rev_id: int
    parent_id: int | None
    timestamp: datetime
    contributor: tuple[str, int | None]
    comment: str | None
    minor: bool


def revision_for(page: Page) -> Revision:
    h = _digest("rev", page.page_id)
    rev_id = 1_180_000_000 + page.page_id * 4_001 + h % 3_989
    is_new = page.ns in (10,) or h % 11 == 0
    start = datetime(2023, 1, 5, tzinfo=timezone.utc)
    timestamp = start + timedelta(seconds=h % (900 * 86_400))
    if page.redirect_target:
        comment: str | None = f"[[WP:AES|←]]Redirected page to [[{page.redirect_target}]]"
    else:
        comment = COMMENTS[(h >> 8) % len(COMMENTS)]
    return Revision(
        rev_id=rev_id,
        parent_id=None if is_new else rev_id - 1 - (h >> 16) % 5_000_000,
        timestamp=timestamp,
        contributor=CONTRIBUTORS[(h >> 24) % len(CONTRIBUTORS)],
        comment=comment,
        minor=(h >> 32) % 5 == 0,
    )


def _xml_text(value: str) -> str:
    return escape(value, {'"': "&quot;"})


def render_export(pages: Iterable[Page]) -> str:
    """Render the pages as a MediaWiki export (schema 0.11), laid out like the WMF dumps."""
    out = [
        f'<mediawiki xmlns="{EXPORT_NS}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        f'xsi:schemaLocation="{EXPORT_NS} http://www.mediawiki.org/xml/export-0.11.xsd" '
        'version="0.11" xml:lang="en">',
        "  <siteinfo>",
        "    <sitename>Wikipedia</sitename>",
        "    <dbname>enwiki</dbname>",
        "    <base>https://en.wikipedia.org/wiki/Main_Page</base>",
        "    <generator>MediaWiki 1.44.0-wmf.28</generator>",
        "    <case>first-letter</case>",
        "    <namespaces>",
    ]
    for key, name in NAMESPACES:
        if name:
            out.append(f'      <namespace key="{key}" case="first-letter">{name}</namespace>')
        else:
            out.append(f'      <namespace key="{key}" case="first-letter" />')
    out += ["    </namespaces>", "  </siteinfo>"]
    for page in pages:
        rev = revision_for(page)
        sha1 = mediawiki_sha1(page.text)
        out += [
            "  <page>",
            f"    <title>{_xml_text(page.title)}</title>",
            f"    <ns>{page.ns}</ns>",
            f"    <id>{page.page_id}</id>",
        ]
        if page.redirect_target:
            out.append(f"    <redirect title={quoteattr(page.redirect_target)} />")
        out += ["    <revision>", f"      <id>{rev.rev_id}</id>"]
        if rev.parent_id:
            out.append(f"      <parentid>{rev.parent_id}</parentid>")
        out.append(f"      <timestamp>{rev.timestamp.strftime('%Y-%m-%dT%H:%M:%SZ')}</timestamp>")
        name, user_id = rev.contributor
        if user_id is None:
            out += ["      <contributor>", f"        <ip>{name}</ip>", "      </contributor>"]
        else:
            out += [
                "      <contributor>",
                f"        <username>{_xml_text(name)}</username>",
                f"        <id>{user_id}</id>",
                "      </contributor>",
            ]
        if rev.minor:
            out.append("      <minor />")
        if rev.comment:
            out.append(f"      <comment>{_xml_text(rev.comment)}</comment>")
        out += [
            f"      <origin>{rev.rev_id}</origin>",
            "      <model>wikitext</model>",
            "      <format>text/x-wiki</format>",
            f'      <text bytes="{len(page.text.encode("utf-8"))}" sha1="{sha1}" '
            f'xml:space="preserve">{_xml_text(page.text)}</text>',
            f"      <sha1>{sha1}</sha1>",
            "    </revision>",
            "  </page>",
        ]
    out.append("</mediawiki>")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# Approximate plain text (the "prose" of an article): enough to place answers and check that
# facts are stated in running text; the real cleaner lives in pipelines/wikipedia.
# --------------------------------------------------------------------------------------------

_DROP_TAGS = {"ref", "references", "table", "gallery", "math", "score"}
_DROP_LINK = re.compile(r"^\s*(file|image|category|[a-z]{2,3}(-[a-z]+)?)\s*:", re.IGNORECASE)


def prose_text(wikitext: str) -> str:
    """Article prose without templates, tables, lists, refs, files, categories and headings."""
    import mwparserfromhell

    code = mwparserfromhell.parse(wikitext)
    for node in code.filter_templates(recursive=False):
        code.remove(node)
    for node in code.filter_comments(recursive=True):
        if node in code.nodes:
            code.remove(node)
    for node in code.filter_tags(recursive=False):
        if str(node.tag).lower() in _DROP_TAGS:
            code.remove(node)
    for node in code.filter_wikilinks(recursive=False):
        if _DROP_LINK.match(str(node.title)):
            code.remove(node)
    kept = []
    for line in str(code).split("\n"):
        stripped = line.strip()
        if stripped.startswith(("*", "#", ":", ";", "{|", "|", "!")):
            continue
        if re.fullmatch(r"=+[^=].*=+", stripped) or stripped.startswith("__"):
            continue
        kept.append(line)
    text = mwparserfromhell.parse("\n".join(kept)).strip_code(normalize=True, collapse=True)
    text = html.unescape(text).replace("\xa0", " ")
    return " ".join(text.split())


def passages(wikitext: str, words: int = 100) -> list[str]:
    """DPR-style passages: consecutive runs of ``words`` whitespace-separated words."""
    tokens = prose_text(wikitext).split()
    return [" ".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]


def articles(pages: Iterable[Page]) -> Iterator[Page]:
    """Main-namespace pages that are not redirects."""
    return (p for p in pages if p.ns == 0 and not p.redirect_target)


# --------------------------------------------------------------------------------------------
# Wikidata-shaped RDF and JSON Lines from the fact tables in sample_facts.py.
# --------------------------------------------------------------------------------------------

WD = "http://www.wikidata.org/entity/"
WDT = "http://www.wikidata.org/prop/direct/"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
SKOS_ALT = "http://www.w3.org/2004/02/skos/core#altLabel"
SCHEMA_DESC = "http://schema.org/description"
XSD_DATETIME = "http://www.w3.org/2001/XMLSchema#dateTime"


@dataclass(frozen=True)
class Triple:
    subject: str
    relation: str
    object: str

    def as_json(self) -> dict[str, object]:
        return {
            "subject": self.subject,
            "relation": self.relation,
            "object": self.object,
            "subject_id": facts.ENTITIES[self.subject][0],
            "object_id": facts.ENTITIES[self.object][0],
            "object_aliases": sorted(facts.ENTITIES[self.object][1]),
        }


def triples() -> list[Triple]:
    return [Triple(s, r, o) for s, r, objs in facts.FACTS for o in objs]


def _nt_literal(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_ntriples(pages: list[Page]) -> str:
    """Wikidata-shaped N-Triples: truthy wdt: statements, rdfs:label / skos:altLabel, descriptions."""
    short_desc = {}
    for page in articles(pages):
        match = re.search(r"\{\{\s*short description\s*\|([^}]*)\}\}", page.text, re.IGNORECASE)
        if match:
            short_desc[page.title] = match.group(1).strip()
    lines: set[str] = set()
    used = {t.subject for t in triples()} | {t.object for t in triples()} | {"human"}
    for label in used:
        qid, aliases = facts.ENTITIES[label]
        iri = f"<{WD}{qid}>"
        lines.add(f"{iri} <{RDFS_LABEL}> {_nt_literal(label)}@en .")
        for alias in aliases:
            lines.add(f"{iri} <{SKOS_ALT}> {_nt_literal(alias)}@en .")
        for lang, text in facts.OTHER_LANGUAGE_LABELS.get(label, ()):
            lines.add(f"{iri} <{RDFS_LABEL}> {_nt_literal(text)}@{lang} .")
        if label in short_desc:
            lines.add(f"{iri} <{SCHEMA_DESC}> {_nt_literal(short_desc[label])}@en .")
    for t in triples():
        lines.add(
            f"<{WD}{facts.ENTITIES[t.subject][0]}> <{WDT}{t.relation}> <{WD}{facts.ENTITIES[t.object][0]}> ."
        )
    for person in facts.HUMANS:
        iri = f"<{WD}{facts.ENTITIES[person][0]}>"
        lines.add(f"{iri} <{WDT}P31> <{WD}Q5> .")
        lines.add(
            f"{iri} <{WDT}P569> {_nt_literal(facts.BIRTH_DATES[person] + 'T00:00:00Z')}^^<{XSD_DATETIME}> ."
        )
    return "\n".join(sorted(lines)) + "\n"


def render_triples_jsonl() -> str:
    rows = sorted(triples(), key=lambda t: (t.subject, t.relation, t.object))
    return "".join(json.dumps(t.as_json(), ensure_ascii=False) + "\n" for t in rows)


def render_templates() -> str:
    return json.dumps(facts.RELATION_TEMPLATES, indent=4, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------------------------
# Question sets about the sample articles.
# --------------------------------------------------------------------------------------------


def render_paq(pages: list[Page]) -> str:
    """PAQ QA-pair metadata lines with answer offsets located in the sample passages."""
    by_id = {p.page_id: p for p in pages}
    cache: dict[int, list[str]] = {}
    lines = []
    for question, answer, sources, subsets, score in facts.PAQ:
        answers = []
        for passage_id, extractor in sources:
            page_id, position = (int(x) for x in passage_id.split("_"))
            if page_id not in cache:
                cache[page_id] = passages(by_id[page_id].text)
            text = cache[page_id][position]
            offset = text.find(answer)
            if offset < 0:
                raise ValueError(f"PAQ answer {answer!r} not in passage {passage_id}: {text!r}")
            answers.append(
                {"passage_id": passage_id, "offset": offset, "text": answer, "extractor": extractor}
            )
        record = {
            "question": question,
            "subsets": subsets,
            "answer": [answer],
            "passage_score": score,
            "answers": answers,
        }
        lines.append(json.dumps(record, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def render_nq() -> str:
    return "".join(json.dumps({"question": q, "answer": a}, ensure_ascii=False) + "\n" for q, a in facts.NQ)


def render_dpr_qas() -> str:
    return "".join(f"{q}\t{a!r}\n" for q, a in facts.DPR_QAS)


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------


def build(out_dir: Path) -> list[Path]:
    """Write every derived file under ``out_dir`` (mirroring ``sample/``); return their paths."""
    make_sql_dumps = _load_module("odqa_sample_sql_dumps", "make_sql_dumps.py")

    pages = read_sources()
    xml = render_export(pages)
    outputs: dict[str, bytes] = {
        XML_NAME: xml.encode("utf-8"),
        XML_NAME + ".bz2": bz2.compress(xml.encode("utf-8"), 9),
        "wikidata/sample.nt": render_ntriples(pages).encode("utf-8"),
        "wikidata/triples.jsonl": render_triples_jsonl().encode("utf-8"),
        "wikidata/relation_query_templates.json": render_templates().encode("utf-8"),
        "paq/paq-sample.metadata.jsonl": render_paq(pages).encode("utf-8"),
        "qa/nq-sample.jsonl": render_nq().encode("utf-8"),
        "qa/dpr-qas-sample.tsv": render_dpr_qas().encode("utf-8"),
    }
    written = []
    for rel, data in outputs.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        written.append(path)
    written += make_sql_dumps.write_dumps(out_dir / XML_NAME, out_dir / "sql")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="rebuild into a temporary folder and report files that differ"
    )
    args = parser.parse_args(argv)
    if not args.check:
        for path in build(SAMPLE_DIR):
            print(f"wrote {path.relative_to(SAMPLE_DIR)} ({path.stat().st_size:,} bytes)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        stale = []
        for path in build(Path(tmp)):
            rel = path.relative_to(tmp)
            committed = SAMPLE_DIR / rel
            if not committed.exists() or not filecmp.cmp(path, committed, shallow=False):
                stale.append(str(rel))
    if stale:
        print("out of date (run python sample/build_sample.py): " + ", ".join(stale))
        return 1
    print("sample files are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
