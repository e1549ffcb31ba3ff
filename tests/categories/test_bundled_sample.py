"""The bundled sample (sample/wiki, sample/sql): every article reaches a domain, by both routes.

The sample's README documents its category graph: 50 articles, 15 redirects, hidden tracking
categories that lead to `Internet` if walked, a hard category redirect, two-parent categories,
and the first depth with a domain for several articles (checked here as hand-computed figures).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from odqa.pipelines.categories.coverage import coverage_report, question_domains
from odqa.pipelines.categories.domain_config import DESIRE_ME_DOMAINS
from odqa.pipelines.categories.graph_input import SqlCategoryGraph
from odqa.pipelines.categories.labeller import LabelResult, label_domains
from odqa.pipelines.wikipedia.ingest import IngestOptions, iter_chunks
from tests.conftest import SAMPLE_DIR

WIKI = SAMPLE_DIR / "wiki" / "enwiki-sample-pages-articles.xml.bz2"
SQL = SAMPLE_DIR / "sql"


@pytest.fixture(scope="module")
def xml_rows() -> dict[str, pa.Table]:
    chunks = list(iter_chunks(WIKI, IngestOptions(workers=1)))
    return {
        name: pa.concat_tables([getattr(c, name) for c in chunks])
        for name in ("category_links", "articles", "passages")
    }


@pytest.fixture(scope="module")
def xml_labels(xml_rows: dict[str, pa.Table]) -> LabelResult:
    return label_domains(xml_rows["category_links"], articles=xml_rows["articles"], progress=False)


def labels_of(result: LabelResult) -> dict[str, tuple[int, list[str]]]:
    out: dict[str, tuple[int, list[str]]] = {}
    for row in result.domains.to_pylist():
        out.setdefault(row["title"], (row["depth"], []))[1].append(row["domain"])
    return out


def test_every_article_reaches_a_domain(xml_labels: LabelResult) -> None:
    report = xml_labels.report
    assert report.articles == 50 and report.labelled == 50
    assert report.unreachable == 0 and report.no_categories == 0
    assert report.redirects == 15 and report.redirects_labelled == 15
    # Category:Footballers (hard #REDIRECT) and Category:Soccer players ({{Category redirect}})
    assert report.category_redirects == 2


def test_documented_depths_and_domains(xml_labels: LabelResult) -> None:
    labels = labels_of(xml_labels)
    assert labels["Alan Turing"] == (2, ["Mathematics"])
    assert labels["Apple Inc."] == (2, ["Technology"])
    assert labels["Microsoft"] == (2, ["Technology"])
    assert labels["YouTube"] == (2, ["Internet", "Mass media"])
    for band in ("The Beatles", "ABBA", "U2"):
        assert labels[band] == (5, ["Culture", "Entertainment"])
    assert labels["Wolfgang Amadeus Mozart"][0] == 5
    assert labels["Mozart"] == labels["Wolfgang Amadeus Mozart"]  # a redirect takes its target's labels
    assert labels["Kling Klang"] == labels["Kraftwerk"]  # ... also through a section link
    assert sorted(d for d, n in xml_labels.report.per_domain.items() if n) == sorted(
        ["People", "Science", "Mathematics", "Culture", "Geography", "Sports", "Technology", "Business",
         "Entertainment", "Education", "Internet", "Mass media"]
    )  # fmt: skip


def test_hidden_categories_do_not_label_articles_internet(xml_labels: LabelResult) -> None:
    """The tracking categories lead to Internet via Wikipedia maintenance; only YouTube is Internet."""
    internet = [r["title"] for r in xml_labels.domains.to_pylist() if r["domain"] == "Internet"]
    assert internet == ["YouTube"]
    assert xml_labels.report.hidden_categories >= 5


@pytest.mark.parametrize(
    ("links", "linktarget"),
    [("categorylinks.sql.gz", "linktarget.sql.gz"), ("categorylinks-legacy.sql.gz", None)],
)
def test_sql_dumps_give_the_same_labels_as_the_xml(
    xml_labels: LabelResult, links: str, linktarget: str | None, tmp_path
) -> None:
    with SqlCategoryGraph(
        SQL / "page.sql.gz",
        SQL / links,
        SQL / linktarget if linktarget else None,
        SQL / "redirect.sql.gz",
        work_dir=tmp_path,
        progress=False,
    ) as graph:
        category_links = pa.Table.from_batches(list(graph.category_links()))
        articles = pa.Table.from_batches(list(graph.articles()))
        assert graph.stats.redirects == 15 and graph.stats.redirect_targets == 16  # + the category redirect
    result = label_domains(category_links, articles=articles, progress=False)
    # The SQL dumps carry hard redirects only; the XML route also follows the soft
    # {{Category redirect}} of "Soccer players", a shorter way up for Manuel Neuer alone.
    sql_rows = {tuple(r.values()) for r in result.domains.to_pylist()}
    xml_rows = {tuple(r.values()) for r in xml_labels.domains.to_pylist()}
    assert sql_rows - xml_rows == {("Manuel Neuer", "Sports", 4)}
    assert xml_rows - sql_rows == {("Manuel Neuer", "Sports", 3)}
    assert result.report.labelled == 50 and result.report.redirects_labelled == 15


def test_coverage_report_matches_hand_computed_figures(
    xml_rows: dict[str, pa.Table], xml_labels: LabelResult
) -> None:
    passages = xml_rows["passages"].select(["passage_id", "title"])

    def first_passage(title: str) -> str:
        return passages.filter(pc.equal(passages["title"], title)).column("passage_id")[0].as_py()

    questions = pa.table(
        {
            "question_id": ["q1", "q2", "q3", "q4"],
            "positive_ids": [
                [first_passage("Albert Einstein")],
                [first_passage("YouTube"), first_passage("Alan Turing")],
                [first_passage("The Beatles")],
                ["no-such-passage"],
            ],
        }
    )
    labels = question_domains(questions, passages, xml_labels.domains, DESIRE_ME_DOMAINS)
    assert labels.column("domains").to_pylist() == [
        ["Science"],
        ["Internet", "Mass media", "Mathematics"],
        ["Culture", "Entertainment"],
        [],
    ]
    articles = xml_rows["articles"]
    main = articles.filter(pc.and_(pc.equal(articles["namespace"], 0), pc.invert(articles["is_redirect"])))
    report = coverage_report(
        xml_labels.domains,
        DESIRE_ME_DOMAINS,
        articles=main.column("title"),
        passages=passages,
        question_labels=labels,
    )
    assert (report.articles, report.labelled_articles) == (50, 50)
    assert report.passages == passages.num_rows > 50 and report.labelled_passages == report.passages
    assert (report.questions, report.labelled_questions) == (4, 3)
    assert report.avg_labels_per_question == pytest.approx(2.0)
    assert {d: n for d, n in report.questions_per_domain.items() if n} == {
        "Science": 1, "Internet": 1, "Mass media": 1, "Mathematics": 1, "Culture": 1, "Entertainment": 1,
    }  # fmt: skip
    assert report.articles_per_domain == xml_labels.report.per_domain
