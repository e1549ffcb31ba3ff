"""The labeller on the real (shortened) English Wikipedia dump in ../shared/data (skipped if absent).

That sample holds articles and redirects but no category pages, so there is no category ->
parent edge: only an article filed directly in a top-level category can be labelled (depth 1);
every other article must be counted as unreachable or category-less, without a crash.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from odqa.pipelines.categories.domain_config import DESIRE_ME_DOMAINS
from odqa.pipelines.categories.labeller import label_domains
from odqa.pipelines.categories.titles import normalize_title
from odqa.pipelines.wikipedia.ingest import IngestOptions, iter_chunks
from tests.conftest import shared_data


@pytest.fixture(scope="module")
def sample_rows() -> tuple[pa.Table, pa.Table]:
    dump = shared_data("wikipedia", "enwiki-sample-pages-articles.xml.bz2")
    chunks = list(iter_chunks(dump, IngestOptions(workers=1)))
    return pa.concat_tables([c.category_links for c in chunks]), pa.concat_tables(
        [c.articles for c in chunks]
    )


def test_article_category_edges_are_found(sample_rows: tuple[pa.Table, pa.Table]) -> None:
    links, articles = sample_rows
    result = label_domains(links, articles=articles, progress=False)
    report = result.report
    assert links.num_rows > 500 and set(links.column("namespace").to_pylist()) == {0}
    assert report.article_edges > 500
    assert report.category_edges == 0  # no category pages in the sample

    main = articles.filter(pc.equal(articles["namespace"], 0))
    assert report.articles == main.filter(pc.invert(main["is_redirect"])).num_rows
    assert report.redirects == main.filter(main["is_redirect"]).num_rows > 0

    # Labels only where an article's own category is a domain; everything else is counted.
    domains = set(DESIRE_ME_DOMAINS)
    direct: dict[str, set[str]] = {}
    for row in links.to_pylist():
        if row["category"] in domains:
            direct.setdefault(normalize_title(row["title"]), set()).add(row["category"])
    got: dict[str, set[str]] = {}
    for row in result.domains.to_pylist():
        assert row["depth"] == 1
        got.setdefault(row["title"], set()).add(row["domain"])
    assert got == direct
    assert report.labelled == len(direct)
    assert report.labelled + report.unreachable + report.no_categories == report.articles
    assert report.unreachable > 50
    assert len(report.missing_domains) >= 30
