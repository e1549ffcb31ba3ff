"""The bundled sample (sample/) parses in its real formats and its files agree with each other.

Every end-to-end test and the demo run on this data, so a broken invariant here (a category
that leads nowhere, a Wikidata fact the article does not state, a PAQ passage id that points
at no page, an SQL dump that disagrees with the XML) would surface later as a confusing
failure somewhere else. These checks read the committed files independently of the builder,
except for the approximate article prose, which comes from ``sample/build_sample.py``.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import importlib.util
import json
import re
import shutil
import string
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path

import pytest

from odqa.pipelines.questions.python_literals import literal_eval

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample"
SHARED_DATA = REPO / ".." / "shared" / "data"
XML_PATH = SAMPLE / "wiki" / "enwiki-sample-pages-articles.xml"
EXPORT_NS = "{http://www.mediawiki.org/xml/export-0.11/}"

WD = "http://www.wikidata.org/entity/"
WDT = "http://www.wikidata.org/prop/direct/"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
SKOS_ALT = "http://www.w3.org/2004/02/skos/core#altLabel"

RELATIONS = {
    "P17",
    "P19",
    "P20",
    "P30",
    "P36",
    "P50",
    "P106",
    "P112",
    "P127",
    "P136",
    "P159",
    "P176",
    "P264",
    "P276",
    "P407",
    "P413",
    "P495",
    "P740",
}
DESIRE_ME_DOMAINS = {
    "Academic disciplines",
    "Business",
    "Communication",
    "Concepts",
    "Culture",
    "Economy",
    "Education",
    "Energy",
    "Engineering",
    "Entertainment",
    "Entities",
    "Ethics",
    "Food and drink",
    "Geography",
    "Government",
    "Health",
    "History",
    "Human behavior",
    "Humanities",
    "Information",
    "Internet",
    "Knowledge",
    "Language",
    "Law",
    "Life",
    "Mass media",
    "Mathematics",
    "Military",
    "Nature",
    "People",
    "Philosophy",
    "Politics",
    "Religion",
    "Science",
    "Society",
    "Sports",
    "Technology",
    "Time",
    "Universe",
}
# Facts whose object the article names only inside its infobox (documented in sample/README.md).
FACTS_WITHOUT_POSITIVE = {
    ("ABBA", "P264", "Epic Records"),
    ("Kraftwerk", "P264", "EMI"),
    ("U2", "P264", "Interscope Records"),
}
CATEGORY_LINK = re.compile(r"\[\[\s*category\s*:\s*([^\]|\n]+?)\s*(?:\|([^\]\n]*))?\]\]", re.IGNORECASE)


# ---------------------------------------------------------------------------------- helpers


@cache
def builder():
    spec = importlib.util.spec_from_file_location("odqa_sample_builder", SAMPLE / "build_sample.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def normalize_title(raw: str) -> str:
    name = " ".join(raw.replace("_", " ").split())
    return name[:1].upper() + name[1:]


PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """DPR/SQuAD answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def contains_answer(text: str, answer: str) -> bool:
    return f" {normalize_answer(answer)} " in f" {normalize_answer(text)} "


@cache
def xml_pages() -> tuple[dict, ...]:
    root = ET.parse(XML_PATH).getroot()
    pages = []
    for page in root.iter(f"{EXPORT_NS}page"):
        rev = page.find(f"{EXPORT_NS}revision")
        text = rev.find(f"{EXPORT_NS}text")
        redirect = page.find(f"{EXPORT_NS}redirect")
        pages.append(
            {
                "id": int(page.findtext(f"{EXPORT_NS}id")),
                "ns": int(page.findtext(f"{EXPORT_NS}ns")),
                "title": page.findtext(f"{EXPORT_NS}title"),
                "redirect": redirect.get("title") if redirect is not None else None,
                "rev_id": int(rev.findtext(f"{EXPORT_NS}id")),
                "model": rev.findtext(f"{EXPORT_NS}model"),
                "format": rev.findtext(f"{EXPORT_NS}format"),
                "sha1": rev.findtext(f"{EXPORT_NS}sha1"),
                "text_bytes": int(text.get("bytes")),
                "text_sha1": text.get("sha1"),
                "text": text.text or "",
            }
        )
    return tuple(pages)


def articles() -> list[dict]:
    return [p for p in xml_pages() if p["ns"] == 0 and p["redirect"] is None]


@cache
def prose(title: str) -> str:
    page = next(p for p in articles() if p["title"] == title)
    return builder().prose_text(page["text"])


@cache
def passages_of(page_id: int) -> list[str]:
    return builder().passages(next(p["text"] for p in articles() if p["id"] == page_id))


def category_edges() -> dict[str, list[str]]:
    """Child page title -> parent category names (without prefix), from [[Category:...]] links."""
    return {
        p["title"]: [normalize_title(m.group(1)) for m in CATEGORY_LINK.finditer(p["text"])]
        for p in xml_pages()
    }


def category_pages() -> dict[str, dict]:
    return {p["title"].split(":", 1)[1]: p for p in xml_pages() if p["ns"] == 14}


def hidden_categories() -> set[str]:
    return {
        name
        for name, p in category_pages().items()
        if "__HIDDENCAT__" in p["text"] or re.search(r"\{\{\s*hidden category", p["text"], re.I)
    }


def category_redirects() -> dict[str, str]:
    out = {}
    for name, p in category_pages().items():
        soft = re.search(r"\{\{\s*category redirect\s*\|\s*([^|}]+)", p["text"], re.I)
        if p["redirect"]:
            out[name] = p["redirect"].split(":", 1)[1]
        elif soft:
            out[name] = normalize_title(soft.group(1))
    return out


def domains_reached(title: str, follow_hidden: bool = False) -> tuple[int, set[str]]:
    """Breadth-first walk up the graph; the top-level domains at the first depth that has any."""
    edges, hidden, redirects = category_edges(), hidden_categories(), category_redirects()
    frontier, seen, depth = set(edges[title]), set(), 1
    while frontier:
        frontier = {redirects.get(c, c) for c in frontier} - seen
        if not follow_hidden:
            frontier -= hidden
        found = frontier & DESIRE_ME_DOMAINS
        if found:
            return depth, found
        seen |= frontier
        frontier = {parent for c in frontier for parent in edges.get(f"Category:{c}", [])}
        depth += 1
    return 0, set()


def mediawiki_base36_sha1(text: str) -> str:
    value, digits, out = (
        int(hashlib.sha1(text.encode("utf-8")).hexdigest(), 16),
        string.digits + string.ascii_lowercase,
        "",
    )
    while value:
        value, rem = divmod(value, 36)
        out = digits[rem] + out
    return out.rjust(31, "0")


SQL_TOKEN = re.compile(r"'((?:[^'\\]|\\.)*)'|(NULL)|(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)|([(),;])")
SQL_ESCAPES = {"n": "\n", "r": "\r", "0": "\x00", "Z": "\x1a", "\\": "\\", "'": "'", '"': '"'}


def parse_mysqldump(path: Path) -> dict[str, list[tuple]]:
    """Rows of every INSERT statement: a small parser of mysqldump value tuples, independent of
    sample/make_sql_dumps.py, that insists on contiguous tokens so nothing is silently skipped."""
    tables: dict[str, list[tuple]] = defaultdict(list)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            head = re.match(r"INSERT INTO `(\w+)` VALUES ", line)
            if not head:
                continue
            pos, row = head.end(), None
            for token in SQL_TOKEN.finditer(line, head.end()):
                assert token.start() == pos, f"{path.name}:{lineno}: unexpected text at {pos}"
                pos = token.end()
                string_value, null, number, punct = token.groups()
                if punct == "(":
                    row = []
                elif punct == ")":
                    tables[head.group(1)].append(tuple(row))
                elif punct == ";":
                    break
                elif punct is None:
                    if null:
                        row.append(None)
                    elif number is not None:
                        row.append(float(number) if "." in number or "e" in number else int(number))
                    else:
                        row.append(re.sub(r"\\(.)", lambda m: SQL_ESCAPES[m.group(1)], string_value))
            assert line[pos:].strip() == "", f"{path.name}:{lineno}: trailing text"
    return tables


@cache
def rdf_statements() -> frozenset[tuple[str, str, str]]:
    """(subject IRI, predicate IRI, object) of sample.nt, objects as IRI or 'lexical'@lang / ^^type."""
    pattern = re.compile(r'^<([^>]+)> <([^>]+)> (<[^>]+>|"(?:[^"\\]|\\.)*"(?:@[a-z-]+|\^\^<[^>]+>)?) \.$')
    out = set()
    for lineno, line in enumerate(
        (SAMPLE / "wikidata" / "sample.nt").read_text(encoding="utf-8").splitlines(), 1
    ):
        match = pattern.match(line)
        assert match, f"sample.nt:{lineno}: not an N-Triples statement: {line!r}"
        out.add(match.groups())
    return frozenset(out)


def literal(obj: str) -> tuple[str, str]:
    match = re.fullmatch(r'"((?:[^"\\]|\\.)*)"@([a-z-]+)', obj)
    assert match, obj
    return json.loads(f'"{match.group(1)}"'), match.group(2)


@cache
def rdf_entities() -> dict[str, tuple[str, frozenset[str]]]:
    """QID -> (English label, English aliases)."""
    labels, aliases = {}, defaultdict(set)
    for s, p, o in rdf_statements():
        if p in (RDFS_LABEL, SKOS_ALT) and literal(o)[1] == "en":
            qid = s.removeprefix(WD)
            if p == RDFS_LABEL:
                assert qid not in labels, f"two English labels for {qid}"
                labels[qid] = literal(o)[0]
            else:
                aliases[qid].add(literal(o)[0])
    return {qid: (label, frozenset(aliases[qid])) for qid, label in labels.items()}


@cache
def rdf_facts() -> frozenset[tuple[str, str, str]]:
    """(subject QID, relation, object QID) for the question relations."""
    return frozenset(
        (s.removeprefix(WD), p.removeprefix(WDT), o[1:-1].removeprefix(WD))
        for s, p, o in rdf_statements()
        if p.startswith(WDT) and p.removeprefix(WDT) in RELATIONS
    )


def jsonl(path: Path) -> list[dict]:
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        assert line.strip(), f"{path.name}:{lineno}: empty line"
        rows.append(json.loads(line))
    return rows


# ------------------------------------------------------------------------------ XML export


def test_export_uses_the_mediawiki_0_11_schema_with_a_full_siteinfo():
    root = ET.parse(XML_PATH).getroot()
    assert root.tag == f"{EXPORT_NS}mediawiki" and root.get("version") == "0.11"
    namespaces = {int(ns.get("key")): (ns.text or "") for ns in root.iter(f"{EXPORT_NS}namespace")}
    assert {0: "", 6: "File", 10: "Template", 14: "Category"}.items() <= namespaces.items()


def test_pages_have_ascending_unique_ids_and_consistent_revision_metadata():
    pages = xml_pages()
    ids = [p["id"] for p in pages]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    prefixes = {"Category": 14, "File": 6, "Template": 10}
    for p in pages:
        prefix = p["title"].split(":", 1)[0] if ":" in p["title"] else ""
        assert p["ns"] == prefixes.get(prefix, 0), p["title"]
        assert (p["model"], p["format"]) == ("wikitext", "text/x-wiki")
        assert p["text_bytes"] == len(p["text"].encode("utf-8")), p["title"]
        assert p["sha1"] == p["text_sha1"] == mediawiki_base36_sha1(p["text"]), p["title"]


def test_bz2_copy_holds_the_same_bytes():
    compressed = (SAMPLE / "wiki" / "enwiki-sample-pages-articles.xml.bz2").read_bytes()
    assert bz2.decompress(compressed) == XML_PATH.read_bytes()


def test_page_kinds_and_sizes():
    pages = xml_pages()
    assert len(articles()) >= 40
    assert sum(p["ns"] == 14 for p in pages) >= 30
    assert sum(p["ns"] == 10 for p in pages) >= 2
    assert sum(p["ns"] == 6 for p in pages) >= 1
    article_titles = {p["title"] for p in articles()}
    main_redirects = [p for p in pages if p["ns"] == 0 and p["redirect"]]
    assert len(main_redirects) >= 6
    assert all(p["redirect"] in article_titles for p in main_redirects)
    for page in articles():
        assert 150 <= len(prose(page["title"]).split()) <= 600, page["title"]


def test_redirect_element_agrees_with_the_redirect_link():
    for p in xml_pages():
        link = re.match(r"#redirect\s*\[\[\s*:?([^\]|#]+)", p["text"], re.IGNORECASE)
        assert bool(link) == bool(p["redirect"]), p["title"]
        if link:
            assert normalize_title(link.group(1)) == p["redirect"]


def test_articles_use_realistic_markup():
    texts = [p["text"] for p in articles()]
    features = {
        "infobox": r"\{\{\s*Infobox",
        "named ref": r"<ref name=\"?[^>/]+\"?\s*/>",
        "citation template": r"<ref[^>]*>\{\{\s*cite (web|book|news)",
        "table": r'\{\| class="wikitable',
        "bullet list": r"(?m)^\* ",
        "numbered list": r"(?m)^# ",
        "image": r"\[\[File:[^\]]*\|thumb",
        "interlanguage": r"(?m)^\[\[(de|fr|es|ja|it|pl|nl|sv|pt|sr|hr|ca|ga):",
        "reflist": r"\{\{\s*reflist",
        "external link": r"\[https?://\S+ [^\]]+\]",
        "nbsp": r"&nbsp;",
        "comment": r"<!--",
        "bold": r"'''",
        "heading": r"(?m)^==[^=]",
    }
    for name, pattern in features.items():
        count = sum(bool(re.search(pattern, t, re.IGNORECASE)) for t in texts)
        assert count >= (3 if name in ("comment", "external link", "numbered list") else 8), (name, count)
    assert all(CATEGORY_LINK.search(t) for t in texts)
    # nested templates inside infobox values, e.g. {{birth date|...}} within {{Infobox ...}}
    assert sum(bool(re.search(r"\{\{\s*Infobox[^{}]*\{\{", t)) for t in texts) >= 20


# -------------------------------------------------------------------------- category graph


def test_top_level_category_pages_are_desire_me_domains():
    tops = {
        name
        for name, p in category_pages().items()
        if "Main topic classifications"
        in [normalize_title(m.group(1)) for m in CATEGORY_LINK.finditer(p["text"])]
    }
    assert len(tops) >= 8 and tops <= DESIRE_ME_DOMAINS


def test_category_graph_has_a_cycle_a_two_parent_category_hidden_categories_and_redirects():
    edges = category_edges()
    parents = {name: edges[p["title"]] for name, p in category_pages().items()}
    assert {"Culture", "Entertainment"} <= set(parents["Music"])
    assert sum(len(set(ps)) >= 2 for ps in parents.values()) >= 5

    def on_cycle(start: str) -> bool:
        stack, seen = list(parents.get(start, [])), set()
        while stack:
            node = stack.pop()
            if node == start:
                return True
            if node not in seen:
                seen.add(node)
                stack.extend(parents.get(node, []))
        return False

    assert on_cycle("Computing") and on_cycle("Computer science")
    assert {
        "Articles with short description",
        "All articles with unsourced statements",
        "CS1 maint: url-status",
    } <= hidden_categories()
    redirects = category_redirects()
    assert redirects["Soccer players"] == "Association football players"  # soft {{Category redirect}}
    assert redirects["Footballers"] == "Association football players"  # hard #REDIRECT
    linked = {c for cats in edges.values() for c in cats}
    assert {"Soccer players", "Footballers", "Articles with short description"} <= linked


def test_every_article_reaches_a_top_level_domain_through_visible_categories():
    unreached = [p["title"] for p in articles() if not domains_reached(p["title"])[1]]
    assert unreached == []
    depth, found = domains_reached("Lionel Messi")
    assert found and depth >= 2


def test_hidden_categories_would_leak_a_domain_if_followed():
    # The maintenance chain ends in Internet, so a walker that ignores hiddenness labels wrongly.
    edges = category_edges()
    assert edges["Category:Articles with short description"] == ["Wikipedia maintenance"]
    chain, node = [], "Wikipedia maintenance"
    while node not in DESIRE_ME_DOMAINS:
        chain.append(node)
        node = edges[f"Category:{node}"][0]
    assert node == "Internet" and len(chain) == 3


# ------------------------------------------------------------------------------ Wikidata


def oxigraph_binary() -> str | None:
    local = Path(sys.executable).parent / "oxigraph"
    return str(local) if local.exists() else shutil.which("oxigraph")


def test_ntriples_parse_with_oxigraph_to_the_same_statements():
    binary = oxigraph_binary()
    if binary is None:
        pytest.skip("oxigraph CLI not installed")
    result = subprocess.run(
        [binary, "convert", "--from-file", str(SAMPLE / "wikidata" / "sample.nt"), "--to-format", "nt"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    canonical = {line for line in result.stdout.splitlines() if line.strip()}
    ours = {line for line in (SAMPLE / "wikidata" / "sample.nt").read_text(encoding="utf-8").splitlines()}
    assert canonical == ours


def test_wikidata_sample_is_wikidata_shaped():
    for s, p, _ in rdf_statements():
        assert re.fullmatch(re.escape(WD) + r"Q\d+", s)
        assert p in (RDFS_LABEL, SKOS_ALT, "http://schema.org/description") or re.fullmatch(
            re.escape(WDT) + r"P\d+", p
        )
    facts = rdf_facts()
    per_relation = Counter(r for _, r, _ in facts)
    assert set(per_relation) == RELATIONS and min(per_relation.values()) >= 3
    assert len(facts) >= 80
    entities = rdf_entities()
    assert all(q in entities for s, _, o in facts for q in (s, o))
    subject_labels = {entities[s][0] for s, _, _ in facts}
    assert subject_labels <= {p["title"] for p in articles()}
    invented = {q for q in entities if int(q[1:]) >= 990_000_001}
    assert invented and all(int(q[1:]) < 1_000_000_000 for q in invented)


def test_triples_jsonl_equals_the_rdf_facts():
    entities = rdf_entities()
    from_rdf = {(entities[s][0], r, entities[o][0], s, o, entities[o][1]) for s, r, o in rdf_facts()}
    rows = jsonl(SAMPLE / "wikidata" / "triples.jsonl")
    from_jsonl = {
        (
            r["subject"],
            r["relation"],
            r["object"],
            r["subject_id"],
            r["object_id"],
            frozenset(r["object_aliases"]),
        )
        for r in rows
    }
    assert len(rows) == len(from_jsonl) == len(from_rdf)
    assert from_jsonl == from_rdf


def test_facts_are_stated_in_the_subject_articles():
    rows = jsonl(SAMPLE / "wikidata" / "triples.jsonl")
    missing = {
        (r["subject"], r["relation"], r["object"])
        for r in rows
        if not any(contains_answer(prose(r["subject"]), a) for a in [r["object"], *r["object_aliases"]])
    }
    assert missing == FACTS_WITHOUT_POSITIVE


def test_relation_templates_cover_every_relation():
    templates = json.loads(
        (SAMPLE / "wikidata" / "relation_query_templates.json").read_text(encoding="utf-8")
    )
    assert set(templates) >= RELATIONS
    assert all(t.count("[X]") == 1 for t in templates.values())
    published = SHARED_DATA / "entityquestions" / "relation_query_templates.json"
    if published.exists():
        reference = json.loads(published.read_text(encoding="utf-8"))
        assert {k: templates[k] for k in templates if k in reference} == {
            k: reference[k] for k in templates if k in reference
        }


# --------------------------------------------------------------------------------- QA sets


def test_paq_metadata_lines_point_at_sample_passages():
    rows = jsonl(SAMPLE / "paq" / "paq-sample.metadata.jsonl")
    assert 50 <= len(rows) <= 70
    article_ids = {p["id"]: p["title"] for p in articles()}
    by_passage = Counter()
    for row in rows:
        assert set(row) == {"question", "subsets", "answer", "passage_score", "answers"}
        assert (
            isinstance(row["question"], str) and row["answer"] and set(row["subsets"]) <= {"L1", "L4", "NE"}
        )
        assert isinstance(row["passage_score"], float)
        for ans in row["answers"]:
            assert re.fullmatch(r"\d+_\d+", ans["passage_id"]) and ans["extractor"] in {"L", "NE"}
            page_id, position = map(int, ans["passage_id"].split("_"))
            assert page_id in article_ids
            passage = passages_of(page_id)[position]
            assert (
                passage[ans["offset"] : ans["offset"] + len(ans["text"])] == ans["text"] == row["answer"][0]
            )
        by_passage[row["answers"][0]["passage_id"]] += 1
    assert max(by_passage.values()) <= 6
    assert sum(n >= 3 for n in by_passage.values()) >= 5 and sum(n < 3 for n in by_passage.values()) >= 5
    assert any(len(row["answers"]) > 1 for row in rows)


def test_nq_and_dpr_questions_are_answerable_from_the_sample():
    corpus = " ".join(normalize_answer(prose(p["title"])) for p in articles())
    nq = jsonl(SAMPLE / "qa" / "nq-sample.jsonl")
    assert len(nq) >= 25 and all(set(r) == {"question", "answer"} for r in nq)
    dpr = []
    for lineno, line in enumerate(
        (SAMPLE / "qa" / "dpr-qas-sample.tsv").read_text(encoding="utf-8").splitlines(), 1
    ):
        question, answers = line.split("\t")
        parsed = literal_eval(answers)
        assert isinstance(parsed, list) and all(isinstance(a, str) for a in parsed), lineno
        dpr.append({"question": question, "answer": parsed})
    assert len(dpr) >= 15
    for row in nq + dpr:
        assert row["answer"] and any(contains_answer(corpus, a) for a in row["answer"]), row


# ------------------------------------------------------------------------------ SQL dumps


@cache
def sql(name: str) -> dict[str, list[tuple]]:
    return parse_mysqldump(SAMPLE / "sql" / name)


def xml_category_links() -> set[tuple[int, str]]:
    return {
        (p["id"], normalize_title(m.group(1)).replace(" ", "_"))
        for p in xml_pages()
        for m in CATEGORY_LINK.finditer(p["text"])
    }


def test_page_dump_matches_the_xml():
    rows = sql("page.sql.gz")["page"]
    assert all(len(r) == 12 for r in rows)
    expected = {
        (
            p["id"],
            p["ns"],
            (p["title"].split(":", 1)[1] if p["ns"] else p["title"]).replace(" ", "_"),
            int(p["redirect"] is not None),
            p["rev_id"],
            p["text_bytes"],
        )
        for p in xml_pages()
    }
    assert {(r[0], r[1], r[2], r[3], r[8], r[9]) for r in rows} == expected
    titles = {r[2] for r in rows}
    assert "Zürich" in titles and "Harry_Potter_and_the_Philosopher's_Stone" in titles
    assert any(r[7] is None for r in rows) and all(r[11] is None for r in rows)


def test_categorylinks_dumps_encode_the_xml_category_graph():
    targets = {r[0]: (r[1], r[2]) for r in sql("linktarget.sql.gz")["linktarget"]}
    assert {ns for ns, _ in targets.values()} >= {10, 14}
    new = sql("categorylinks.sql.gz")["categorylinks"]
    legacy = sql("categorylinks-legacy.sql.gz")["categorylinks"]
    assert all(len(r) == 7 for r in new + legacy)
    assert all(targets[r[6]][0] == 14 for r in new)
    expected = xml_category_links()
    assert {(r[0], targets[r[6]][1]) for r in new} == expected
    assert {(r[0], r[1]) for r in legacy} == expected
    ns_by_id = {p["id"]: p["ns"] for p in xml_pages()}
    kinds = {14: "subcat", 6: "file"}
    assert all(r[4] == kinds.get(ns_by_id[r[0]], "page") and r[5] == 1 for r in new)
    assert all(r[6] == kinds.get(ns_by_id[r[0]], "page") and r[5] == "uppercase" for r in legacy)
    assert {r[4] for r in new} == {"page", "subcat", "file"}
    # sort keys: "PREFIX\nTITLE" upper-cased, identical in both layouts
    assert {(r[0], targets[r[6]][1], r[1], r[3]) for r in new} == {(r[0], r[1], r[2], r[4]) for r in legacy}
    einstein = next(r for r in legacy if r[0] == 1012 and r[1] == "Theoretical_physicists")
    assert einstein[2] == "EINSTEIN, ALBERT\nALBERT EINSTEIN" and einstein[4] == "Einstein, Albert"
    assert any("'" in r[1] for r in legacy) and any("ü" in r[1] for r in legacy)


def test_sql_text_uses_mysqldump_escapes_and_several_insert_statements():
    raw = gzip.decompress((SAMPLE / "sql" / "categorylinks-legacy.sql.gz").read_bytes()).decode("utf-8")
    assert "\\'" in raw and "\\n" in raw and raw.count("INSERT INTO `categorylinks` VALUES") >= 2
    assert "CREATE TABLE `categorylinks`" in raw and "`cl_to` varbinary(255)" in raw
    raw_new = gzip.decompress((SAMPLE / "sql" / "categorylinks.sql.gz").read_bytes()).decode("utf-8")
    assert "`cl_target_id` bigint(20) unsigned NOT NULL" in raw_new and "cl_to" not in raw_new


def test_redirect_dump_matches_the_xml():
    rows = sql("redirect.sql.gz")["redirect"]
    expected = {}
    for p in xml_pages():
        if p["redirect"]:
            ns = 14 if p["redirect"].startswith("Category:") else 0
            expected[p["id"]] = (
                ns,
                (p["redirect"].split(":", 1)[1] if ns else p["redirect"]).replace(" ", "_"),
            )
    assert {r[0]: (r[1], r[2]) for r in rows} == expected
    assert any(r[4] for r in rows)  # a redirect to a section keeps its fragment


# ----------------------------------------------------------------------------- freshness


def test_generated_files_are_up_to_date_with_their_sources():
    assert builder().main(["--check"]) == 0
