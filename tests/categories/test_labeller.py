"""The domain labeller on hand-built graphs and against a per-article BFS on random graphs."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from odqa.pipelines.categories import labeller
from odqa.pipelines.categories.domain_config import DomainConfig
from odqa.pipelines.categories.labeller import label_domains
from tests.categories.naive import naive_labels

DOMAINS = ("Science", "History", "Sports")


def links(*rows: tuple[str, str]) -> pa.Table:
    """(child, parent) rows; a child written "Category:X" is a category page, else an article."""
    return pa.table(
        {
            "page_id": list(range(len(rows))),
            "title": [c for c, _ in rows],
            "namespace": [14 if c.startswith("Category:") else 0 for c, _ in rows],
            "category": [p for _, p in rows],
            "kind": ["subcat" if c.startswith("Category:") else "page" for c, _ in rows],
        }
    )


def articles(*rows: tuple[str, int, str | None]) -> pa.Table:
    """(title, namespace, redirect target or None)."""
    return pa.table(
        {
            "title": [t for t, _, _ in rows],
            "namespace": pa.array([ns for _, ns, _ in rows], pa.int32()),
            "is_redirect": [r is not None for _, _, r in rows],
            "redirect_target": [r for _, _, r in rows],
        }
    )


def labels_of(result: labeller.LabelResult) -> dict[str, tuple[int, set[str]]]:
    out: dict[str, tuple[int, set[str]]] = {}
    for row in result.domains.to_pylist():
        depth, found = out.setdefault(row["title"], (row["depth"], set()))
        assert depth == row["depth"], "one depth per title"
        found.add(row["domain"])
    return out


def run(table: pa.Table, **kwargs) -> labeller.LabelResult:
    config = kwargs.pop("config", DomainConfig(domains=DOMAINS))
    return label_domains(table, config, progress=False, **kwargs)


def test_own_category_is_depth_one_and_parents_add_one() -> None:
    result = run(links(("Newton", "Science"), ("Einstein", "Physicists"), ("Category:Physicists", "Science")))
    assert labels_of(result) == {"Newton": (1, {"Science"}), "Einstein": (2, {"Science"})}
    assert result.report.depth_histogram == {1: 1, 2: 1}
    assert result.report.per_domain == {"Science": 2, "History": 0, "Sports": 0}


def test_cycles_terminate() -> None:
    table = links(
        ("Looping", "Category A"),
        ("Category:Category A", "Category B"),
        ("Category:Category B", "Category A"),  # A <-> B, never reaching a domain
        ("Reaching", "Category C"),
        ("Category:Category C", "Category D"),
        ("Category:Category D", "Category C"),
        ("Category:Category D", "History"),
        ("Category:History", "Category C"),  # a domain inside a cycle
    )
    result = run(table)
    assert labels_of(result) == {"Reaching": (3, {"History"})}
    assert result.report.unreachable == 1 and result.report.labelled == 1


def test_two_parents_at_the_same_depth_give_both_domains() -> None:
    result = run(
        links(("Cricket history", "Cricket"), ("Category:Cricket", "Sports"), ("Category:Cricket", "History"))
    )
    assert labels_of(result) == {"Cricket history": (2, {"Sports", "History"})}


def test_only_the_nearer_domain_when_depths_differ() -> None:
    table = links(
        ("Apollo 11", "Spaceflight"),
        ("Category:Spaceflight", "Science"),
        ("Category:Spaceflight", "Space history"),
        ("Category:Space history", "History"),
    )
    assert labels_of(run(table)) == {"Apollo 11": (2, {"Science"})}


def test_article_with_categories_at_several_depths_takes_the_nearest() -> None:
    table = links(
        ("Mixed", "Deep"),
        ("Mixed", "Sports"),
        ("Category:Deep", "Science"),
    )
    assert labels_of(run(table)) == {"Mixed": (1, {"Sports"})}


def test_unreachable_and_category_less_articles_are_counted() -> None:
    table = links(("Island", "Orphan category"), ("Labelled", "Science"))
    result = run(table, articles=articles(("Island", 0, None), ("Labelled", 0, None), ("Bare", 0, None)))
    report = result.report
    assert labels_of(result) == {"Labelled": (1, {"Science"})}
    assert (report.articles, report.labelled, report.unreachable, report.no_categories) == (3, 1, 1, 1)


def test_hidden_categories_never_lead_to_a_label() -> None:
    table = links(
        ("Tracked", "Articles with dead external links"),
        ("Category:Articles with dead external links", "Science"),
        ("Tracked", "CS1 maint: archived copy as title"),
        ("Category:CS1 maint: archived copy as title", "History"),
        ("Hiddencat member", "Stubs by date"),
        ("Category:Stubs by date", "Hidden categories"),  # __HIDDENCAT__ puts it there
        ("Category:Stubs by date", "Science"),
        ("Named", "Secret"),
        ("Category:Secret", "Science"),
        ("Through hidden", "Physics"),
        ("Category:Physics", "Wikipedia categories named after sciences"),
        ("Category:Wikipedia categories named after sciences", "Science"),
        ("Pageant winner", "Pageants"),  # "Pages" prefix must not hide "Pageants"
        ("Category:Pageants", "Sports"),
    )
    config = DomainConfig(domains=DOMAINS, hidden_categories=frozenset({"Secret"}))
    result = run(table, config=config)
    assert labels_of(result) == {"Pageant winner": (2, {"Sports"})}
    assert result.report.hidden_categories >= 5
    # Only hidden categories left: Tracked, Hiddencat member, Named; a walk that dies: Through hidden.
    assert result.report.no_categories == 3 and result.report.unreachable == 1


def test_hidden_prefix_does_not_hide_a_configured_domain() -> None:
    config = DomainConfig(domains=("Wikipedia people",), hidden_prefixes=("Wikipedia",))
    result = run(links(("Jimmy Wales", "Wikipedia people")), config=config)
    assert labels_of(result) == {"Jimmy Wales": (1, {"Wikipedia people"})}


def test_article_and_category_redirects_resolve() -> None:
    table = links(
        ("United States", "Countries"),
        ("Category:Countries", "History"),
        ("Neutron", "Old particle category"),  # member of a redirected category
        ("Category:Particles", "Science"),
        ("Category:Old particle category", "Wikipedia soft redirected categories"),
        ("USA", "Redirects from abbreviations"),  # a redirect's own (maintenance) category
    )
    arts = articles(
        ("United States", 0, None),
        ("Neutron", 0, None),
        ("USA", 0, "United States"),
        ("U.S.", 0, "USA"),  # double redirect
        ("US history", 0, "United States#History"),  # section link
        ("Loop 1", 0, "Loop 2"),
        ("Loop 2", 0, "Loop 1"),
        ("Gone", 0, "Deleted page"),
        ("To a category", 0, "Category:Countries"),
        ("Category:Old particle category", 14, "Category:Particles"),
    )
    result = run(table, articles=arts)
    assert labels_of(result) == {
        "United States": (2, {"History"}),
        "USA": (2, {"History"}),
        "U.S.": (2, {"History"}),
        "US history": (2, {"History"}),
        "Neutron": (2, {"Science"}),
    }
    report = result.report
    assert report.articles == 2 and report.labelled == 2
    assert report.redirects == 7 and report.redirects_labelled == 3
    assert report.redirects_unresolved == 3  # the loop (2) and the redirect to a category
    assert report.category_redirects == 1


def test_max_depth_limits_the_walk() -> None:
    table = links(("Deep", "Level 1"), ("Category:Level 1", "Level 2"), ("Category:Level 2", "Science"))
    assert labels_of(run(table)) == {"Deep": (3, {"Science"})}
    shallow = run(table, config=DomainConfig(domains=DOMAINS, max_depth=2))
    assert labels_of(shallow) == {}
    assert shallow.report.unreachable == 1


def test_titles_are_normalized_everywhere() -> None:
    table = pa.table(
        {
            "title": ["foo_bar", "Category:Food_and drink stuff", "foo bar"],
            "namespace": pa.array([0, 14, 0], pa.int32()),
            "category": ["food_and_drink_stuff", "food_and_drink", "Food  and drink stuff"],
        }
    )
    result = run(table, config=DomainConfig(domains=("food and drink",)))
    assert labels_of(result) == {"Foo bar": (2, {"Food and drink"})}
    assert result.report.articles == 1


def test_missing_domains_are_reported() -> None:
    result = run(links(("A", "Science")))
    assert result.report.missing_domains == ["History", "Sports"]


def test_rows_are_sorted_and_domains_in_configured_order() -> None:
    table = links(("b", "Sports"), ("b", "Science"), ("a", "History"), ("a", "Science"))
    rows = run(table).domains.to_pylist()
    assert [(r["title"], r["domain"]) for r in rows] == [
        ("A", "Science"),
        ("A", "History"),
        ("B", "Science"),
        ("B", "Sports"),
    ]


def test_batch_source_in_small_groups_equals_table(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, arts = random_graph(random.Random(7))
    whole = run(graph, articles=arts)
    monkeypatch.setattr(labeller, "_GROUP_ROWS", 5)
    streamed = run(
        lambda: graph.to_batches(max_chunksize=3), articles=lambda: arts.to_batches(max_chunksize=4)
    )
    assert streamed.domains.equals(whole.domains)
    assert streamed.report == whole.report


# -- property test against the per-article definition ---------------------------------------------
def random_graph(
    rnd: random.Random, n_categories: int = 40, n_articles: int = 30
) -> tuple[pa.Table, pa.Table]:
    names = [f"C{i}" for i in range(n_categories)] + list(DOMAINS) + ["Articles with x", "CS1 y", "Quiet"]
    rows = []
    for name in names:
        for _ in range(rnd.choice([0, 1, 1, 2, 3])):
            rows.append((f"Category:{name}", rnd.choice(names)))  # cycles and self-loops included
    rows.append(("Category:Quiet", "Hidden categories"))
    for i in range(n_articles):
        for _ in range(rnd.choice([0, 1, 2, 3])):
            rows.append((f"Art{i}", rnd.choice(names)))
    arts = articles(*[(f"Art{i}", 0, None) for i in range(n_articles)])
    return links(*rows), arts


@pytest.mark.parametrize("seed", range(40))
def test_matches_per_article_bfs_on_random_graphs(seed: int) -> None:
    rnd = random.Random(seed)
    graph, arts = random_graph(rnd, n_categories=rnd.choice([4, 12, 40]))
    max_depth = rnd.choice([1, 2, 3, 10])
    result = run(graph, articles=arts, config=DomainConfig(domains=DOMAINS, max_depth=max_depth))

    article_categories: dict[str, list[str]] = {}
    parents: dict[str, list[str]] = {}
    for row in graph.to_pylist():
        if row["namespace"] == 14:
            parents.setdefault(row["title"].removeprefix("Category:"), []).append(row["category"])
        else:
            article_categories.setdefault(row["title"], []).append(row["category"])
    hidden = {"Articles with x", "CS1 y", "Quiet", "Hidden categories"}
    expected = naive_labels(article_categories, parents, DOMAINS, hidden, max_depth)
    assert labels_of(result) == expected
    report = result.report
    assert report.labelled == len(expected)
    assert report.labelled + report.unreachable + report.no_categories == report.articles == 30
