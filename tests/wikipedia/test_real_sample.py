"""Acceptance checks of issue 2 on the real (shortened) English Wikipedia dump in shared data.

Expected values are computed independently of the code under test: redirects and page counts
by regexes over the decompressed XML, categories by a plain regex over each page's wikitext.
"""

from __future__ import annotations

import bz2
import html
import re
from collections import defaultdict

import pytest

from odqa.pipelines.wikipedia.dump_reader import iter_pages
from odqa.pipelines.wikipedia.ingest import IngestOptions, iter_chunks
from odqa.pipelines.wikipedia.wikitext_cleaner import clean_wikitext, is_disambiguation
from tests.conftest import shared_data

REMNANTS = ("{{", "}}", "[[", "]]", "<ref", "thumb|", "Category:", "&nbsp;")


@pytest.fixture(scope="module")
def dump():
    return shared_data("wikipedia", "enwiki-sample-pages-articles.xml.bz2")


@pytest.fixture(scope="module")
def ingested(dump):
    tables: dict[str, list[dict]] = {"articles": [], "passages": [], "category_links": []}
    skipped: dict[str, int] = defaultdict(int)
    for chunk in iter_chunks(dump, IngestOptions(workers=2)):
        for name in tables:
            tables[name].extend(getattr(chunk, name).to_pylist())
        for reason, n in chunk.skipped.items():
            skipped[reason] += n
        assert chunk.problems == []
    return tables, dict(skipped)


@pytest.fixture(scope="module")
def raw_pages(dump):
    return {p.page_id: p for p in iter_pages(dump)}


def test_no_markup_remnants_and_at_most_100_words(ingested) -> None:
    passages = ingested[0]["passages"]
    assert len(passages) > 3000
    for p in passages:
        for remnant in REMNANTS:
            assert remnant not in p["text"], (p["passage_id"], remnant, p["text"])
        assert 1 <= len(p["text"].split()) <= 100, p["passage_id"]
    assert len({p["passage_id"] for p in passages}) == len(passages)


def test_passages_joined_equal_the_cleaned_article(ingested, raw_pages) -> None:
    by_article: dict[int, list[dict]] = defaultdict(list)
    for p in ingested[0]["passages"]:
        by_article[p["article_id"]].append(p)
    articles = [
        p for p in raw_pages.values()
        if p.namespace == 0 and p.redirect_target is None and p.text and not is_disambiguation(p.text)
    ]  # fmt: skip
    assert len(articles) > 90
    for page in articles:
        rows = by_article.pop(page.page_id)
        assert [r["position"] for r in rows] == list(range(len(rows)))
        assert [r["passage_id"] for r in rows] == [f"{page.page_id}_{i}" for i in range(len(rows))]
        assert all(r["title"] == page.title for r in rows)
        assert " ".join(r["text"] for r in rows) == clean_wikitext(page.text)
    assert not by_article, "passages only for main-namespace, non-redirect articles"


def test_every_page_recorded_and_redirects_with_their_target(dump, ingested) -> None:
    xml = bz2.decompress(dump.read_bytes()).decode("utf-8")
    pages = re.findall(r"<page>.*?</page>", xml, re.DOTALL)
    articles = {a["article_id"]: a for a in ingested[0]["articles"]}
    assert len(articles) == len(pages) == len(ingested[0]["articles"])
    expected_redirects = {}
    for page in pages:
        page_id = int(re.search(r"<id>(\d+)</id>", page).group(1))
        target = re.search(r'<redirect title="([^"]*)"', page)
        if target:
            expected_redirects[page_id] = html.unescape(target.group(1))
        assert articles[page_id]["is_redirect"] == bool(target)
    assert len(expected_redirects) >= 50
    for page_id, target in expected_redirects.items():
        assert articles[page_id]["redirect_target"] == target
    with_passages = {p["article_id"] for p in ingested[0]["passages"]}
    assert not with_passages & expected_redirects.keys()


def _expected_categories(text: str) -> list[str]:
    """[[Category:...]] links by a plain regex over the text outside comments and <nowiki>."""
    text = re.sub(r"<!--.*?(?:-->|$)", "", text, flags=re.DOTALL)
    text = re.sub(r"<nowiki>.*?</nowiki>", "", text, flags=re.DOTALL | re.IGNORECASE)
    found: list[str] = []
    for raw in re.findall(r"\[\[\s*[Cc]ategory\s*:([^|\]]*)", text):
        name = " ".join(html.unescape(raw).replace("_", " ").split())
        name = name[:1].upper() + name[1:]
        if name and name not in found:
            found.append(name)
    return found


def test_categories_equal_the_pages_category_links(ingested, raw_pages) -> None:
    got: dict[int, list[str]] = defaultdict(list)
    for row in ingested[0]["category_links"]:
        assert row["kind"] == ("subcat" if row["namespace"] == 14 else "page")
        got[row["page_id"]].append(row["category"])
    checked = 0
    for page in raw_pages.values():
        if page.namespace in (0, 14) and page.text:
            assert got.get(page.page_id, []) == _expected_categories(page.text), page.title
            checked += bool(got.get(page.page_id))
    assert checked > 90


def test_skips_are_counted(ingested) -> None:
    assert ingested[1] == {"disambiguation": 8}
