"""SQL dumps -> category_links / articles rows (both categorylinks schemas), then labels."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from odqa.pipelines.categories.domain_config import DomainConfig
from odqa.pipelines.categories.graph_input import SqlCategoryGraph, soft_category_redirect
from odqa.pipelines.categories.labeller import label_domains
from odqa.pipelines.categories.sql_dump import SqlDumpError
from tests.categories.dumps import (
    CATEGORYLINKS_LEGACY_HEADER,
    CATEGORYLINKS_TARGET_HEADER,
    LINKTARGET_HEADER,
    PAGE_HEADER,
    REDIRECT_HEADER,
    sql_string,
    write_dump,
)

PAGES = [  # page_id, namespace, title, is_redirect
    (1, 0, "Albert_Einstein", 0),
    (2, 14, "Physicists", 0),
    (3, 0, "AE", 1),
    (4, 2, "Some_user", 0),
    (5, 14, "Theoretical_physics", 0),
    (6, 0, "Caf\u00e9_(film)", 0),
]


def page_dump(path: Path) -> Path:
    tuples = b",".join(
        b"(%d,%d,%s,%d,0,0.5,'20240101000000',NULL,1,100,'wikitext',NULL)"
        % (pid, ns, sql_string(title), redirect)
        for pid, ns, title, redirect in PAGES
    )
    return write_dump(path, PAGE_HEADER, [tuples + b";\n"])


def legacy_links(path: Path) -> Path:
    def row(cl_from: int, cl_to: str, kind: str) -> bytes:
        return b"(%d,%s,'SORTKEY','2020-01-01 00:00:00','','uppercase','%s')" % (
            cl_from,
            sql_string(cl_to),
            kind.encode(),
        )

    first = [row(1, "Physicists", "page"), row(1, "Theoretical_physics", "page"), row(2, "Science", "subcat")]
    second = [
        row(3, "Redirects_from_initials", "page"),
        row(4, "Wikipedians", "page"),
        row(99, "Orphans", "page"),
    ]
    second += [row(5, "Physics", "subcat"), row(6, "Films_(1999)", "page")]
    return write_dump(
        path, CATEGORYLINKS_LEGACY_HEADER, [b",".join(first) + b";\n", b",".join(second) + b";\n"]
    )


EXPECTED_LINKS = [
    {"page_id": 1, "title": "Albert Einstein", "namespace": 0, "category": "Physicists", "kind": "page"},
    {
        "page_id": 1,
        "title": "Albert Einstein",
        "namespace": 0,
        "category": "Theoretical physics",
        "kind": "page",
    },
    {"page_id": 2, "title": "Category:Physicists", "namespace": 14, "category": "Science", "kind": "subcat"},
    {"page_id": 3, "title": "AE", "namespace": 0, "category": "Redirects from initials", "kind": "page"},
    {
        "page_id": 5,
        "title": "Category:Theoretical physics",
        "namespace": 14,
        "category": "Physics",
        "kind": "subcat",
    },
    {"page_id": 6, "title": "Caf\u00e9 (film)", "namespace": 0, "category": "Films (1999)", "kind": "page"},
]


def collect(batches) -> list[dict]:
    return [row for batch in batches for row in batch.to_pylist()]


def test_legacy_schema_joins_pages(tmp_path: Path) -> None:
    page = page_dump(tmp_path / "page.sql.gz")
    links = legacy_links(tmp_path / "categorylinks.sql.gz")
    with SqlCategoryGraph(page, links, work_dir=tmp_path, progress=False) as graph:
        assert collect(graph.category_links()) == EXPECTED_LINKS
        got = [
            (a["article_id"], a["title"], a["is_redirect"], a["redirect_target"])
            for a in collect(graph.articles())
        ]
        assert got == [
            (1, "Albert Einstein", False, None),
            (2, "Category:Physicists", False, None),
            (3, "AE", True, None),  # no redirect dump: target unknown
            (5, "Category:Theoretical physics", False, None),
            (6, "Caf\u00e9 (film)", False, None),
        ]
        stats = graph.stats
    assert stats.schema == "cl_to"
    assert stats.page.rows == 6 and stats.pages_kept == 5
    assert stats.categorylinks.rows == 8 and stats.links_staged == 8
    assert stats.links_dangling == 2  # page 4 is a user page (namespace 2), page 99 does not exist
    assert (stats.articles, stats.redirects) == (2, 1)
    assert not list(tmp_path.glob("odqa-categories-*")), "temporary files are removed"


def test_linktarget_schema_gives_the_same_rows(tmp_path: Path) -> None:
    targets = [(100, 14, "Physicists"), (101, 14, "Theoretical_physics"), (102, 14, "Science"),
               (103, 14, "Redirects_from_initials"), (104, 14, "Physics"), (105, 14, "Films_(1999)"),
               (106, 0, "Albert_Einstein")]  # fmt: skip
    lt = write_dump(
        tmp_path / "linktarget.sql",
        LINKTARGET_HEADER,
        [b",".join(b"(%d,%d,%s)" % (i, ns, sql_string(t)) for i, ns, t in targets) + b";\n"],
    )
    rows = [(1, 100, "page"), (1, 101, "page"), (2, 102, "subcat"), (3, 103, "page"), (4, 100, "page"),
            (5, 104, "subcat"), (6, 105, "page"), (6, 106, "page"), (6, 999, "page")]  # fmt: skip
    links = write_dump(
        tmp_path / "categorylinks.sql",
        CATEGORYLINKS_TARGET_HEADER,
        [
            b",".join(b"(%d,'K','','2020-01-01 00:00:00','%s',1,%d)" % (f, k.encode(), t) for f, t, k in rows)
            + b";\n"
        ],
    )
    page = page_dump(tmp_path / "page.sql")
    with SqlCategoryGraph(page, links, lt, work_dir=tmp_path, progress=False) as graph:
        assert collect(graph.category_links()) == EXPECTED_LINKS
        assert graph.stats.schema == "cl_target_id"
        assert graph.stats.links_unknown_target == 2  # 106 is an article, 999 does not exist
        assert graph.stats.linktarget is not None and graph.stats.linktarget.rows == 7
    with pytest.raises(ValueError, match="linktarget"):
        SqlCategoryGraph(page, links, work_dir=tmp_path).__enter__()


def test_corrupt_dump_raises_or_is_skipped(tmp_path: Path) -> None:
    page = page_dump(tmp_path / "page.sql")
    good = b"(1,'Physicists','K','2020-01-01 00:00:00','','uppercase','page');\n"
    bad = b"(2,'Science','K','2020-01-01 00:00:00','','uppercase','subcat'),(5,'Physics' BROKEN);\n"
    links = write_dump(tmp_path / "cl.sql", CATEGORYLINKS_LEGACY_HEADER, [good, bad, good])
    with (
        pytest.raises(SqlDumpError, match=r"cl\.sql: byte \d+"),
        SqlCategoryGraph(page, links, work_dir=tmp_path),
    ):
        pass
    with SqlCategoryGraph(page, links, work_dir=tmp_path, skip_bad=True, progress=False) as graph:
        got = [(r["page_id"], r["category"]) for r in collect(graph.category_links())]
        assert got == [(1, "Physicists"), (1, "Physicists"), (2, "Science")]
        assert graph.stats.categorylinks.skipped_statements == 1


def redirect_dump(path: Path) -> Path:
    rows = [
        (3, 0, "Albert_Einstein", "", "Early_life"),
        (5, 14, "Physics", "", ""),
        (7, 0, "Elsewhere", "wikt", ""),
    ]
    return write_dump(
        path,
        REDIRECT_HEADER,
        [
            b",".join(
                b"(%d,%d,%s,%s,%s)" % (f, ns, sql_string(t), sql_string(w), sql_string(fr))
                for f, ns, t, w, fr in rows
            )
            + b";\n"
        ],
    )


def test_redirect_dump_gives_targets(tmp_path: Path) -> None:
    pages = [*PAGES[:4], (5, 14, "Theoretical_physics", 1), PAGES[5], (7, 0, "Wiktionary_entry", 1)]
    tuples = b",".join(
        b"(%d,%d,%s,%d,0,0.5,'20240101000000',NULL,1,100,'wikitext',NULL)" % (pid, ns, sql_string(t), r)
        for pid, ns, t, r in pages
    )
    page = write_dump(tmp_path / "page.sql", PAGE_HEADER, [tuples + b";\n"])
    links = legacy_links(tmp_path / "categorylinks.sql")
    redirects = redirect_dump(tmp_path / "redirect.sql.gz")
    with SqlCategoryGraph(page, links, redirect=redirects, work_dir=tmp_path, progress=False) as graph:
        targets = {a["title"]: a["redirect_target"] for a in collect(graph.articles()) if a["is_redirect"]}
        assert targets == {
            "AE": "Albert Einstein#Early_life",
            "Category:Theoretical physics": "Category:Physics",
            "Wiktionary entry": None,  # an interwiki redirect leaves this wiki
        }
        assert graph.stats.redirect_targets == 2
        category_links = pa.Table.from_batches(list(graph.category_links()))
        articles = pa.Table.from_batches(list(graph.articles()))
    result = label_domains(
        category_links, DomainConfig(domains=("Science", "Physics")), articles=articles, progress=False
    )
    rows = {(r["title"], r["domain"], r["depth"]) for r in result.domains.to_pylist()}
    # Theoretical physics now redirects to Physics (a domain): Einstein is in it at depth 1.
    assert rows == {("Albert Einstein", "Physics", 1), ("AE", "Physics", 1)}
    assert result.report.redirects_labelled == 1 and result.report.category_redirects == 1


def test_sql_graph_labels_end_to_end(tmp_path: Path) -> None:
    page = page_dump(tmp_path / "page.sql.gz")
    links = legacy_links(tmp_path / "categorylinks.sql.gz")
    with SqlCategoryGraph(page, links, work_dir=tmp_path, progress=False) as graph:
        category_links = pa.Table.from_batches(list(graph.category_links()))
        articles = pa.Table.from_batches(list(graph.articles()))
    result = label_domains(
        category_links, DomainConfig(domains=("Science", "Physics")), articles=articles, progress=False
    )
    rows = {(r["title"], r["domain"], r["depth"]) for r in result.domains.to_pylist()}
    # Physicists -> Science (depth 2); Theoretical physics -> Physics (depth 2): both at 2.
    assert rows == {("Albert Einstein", "Science", 2), ("Albert Einstein", "Physics", 2)}
    report = result.report
    assert (report.articles, report.labelled, report.unreachable) == (2, 1, 1)
    assert report.redirects == 1 and report.redirects_unresolved == 1  # page.sql has no redirect targets


@pytest.mark.parametrize(
    ("wikitext", "target"),
    [
        ("{{Category redirect|Films of 1999}}\n__HIDDENCAT__", "Category:Films of 1999"),
        ("{{category redirect|1=Category:Physics}}", "Category:Physics"),
        ("{{Cat redirect| Science }}", "Category:Science"),
        ("Ordinary category page text [[Category:Science]]", None),
    ],
)
def test_soft_category_redirect(wikitext: str, target: str | None) -> None:
    assert soft_category_redirect(wikitext) == target
