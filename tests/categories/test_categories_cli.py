"""`odqa ingest categories` and `odqa label domains` through the CLI and Prefect flows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from odqa.storage import Workspace
from tests.categories.dumps import CATEGORYLINKS_LEGACY_HEADER, PAGE_HEADER, sql_string, write_dump
from tests.conftest import SAMPLE_DIR

PAGES = [  # page_id, namespace, title, is_redirect
    (1, 0, "Albert_Einstein", 0),
    (2, 0, "Olympic_Games", 0),
    (3, 0, "Lonely_article", 0),
    (4, 0, "AE", 1),
    (10, 14, "Physicists", 0),
    (11, 14, "Multi-sport_events", 0),
    (12, 14, "Physics", 0),
    (13, 14, "Sports", 0),
    (14, 14, "Science", 0),
    (15, 14, "Articles_with_short_description", 0),
]
LINKS = [  # cl_from, cl_to, cl_type
    (1, "Physicists", "page"),
    (1, "Articles_with_short_description", "page"),
    (2, "Multi-sport_events", "page"),
    (4, "Redirects_from_initials", "page"),
    (10, "Physics", "subcat"),
    (11, "Sports", "subcat"),
    (12, "Science", "subcat"),
    (15, "Science", "subcat"),  # a tracking category under a domain: must not label Einstein
]


def write_dumps(
    folder: Path, links: list[tuple[int, str, str]] = LINKS, corrupt: bool = False
) -> tuple[Path, Path]:
    page = write_dump(
        folder / "page.sql.gz",
        PAGE_HEADER,
        [b",".join(b"(%d,%d,%s,%d,0,0.5,'20240101000000',NULL,1,100,'wikitext',NULL)" % (i, ns, sql_string(t), r)
                   for i, ns, t, r in PAGES) + b";\n"],
    )  # fmt: skip
    values = [
        b",".join(
            b"(%d,%s,'K','2020-01-01 00:00:00','','uppercase','%s')" % (f, sql_string(t), k.encode())
            for f, t, k in links
        )
        + b";\n"
    ]
    if corrupt:
        values.append(b"(99,'Broken' 'tuple);\n")
    return page, write_dump(folder / "categorylinks.sql.gz", CATEGORYLINKS_LEGACY_HEADER, values)


def add_passages_and_questions(ws_dir: Path, positives: list[list[str]]) -> None:
    ws = Workspace.resolve(ws_dir)
    with ws.transaction("test-corpus") as tx:
        tx.write(
            "passages",
            [
                {
                    "passage_id": "1_0",
                    "article_id": 1,
                    "title": "Albert Einstein",
                    "text": "a",
                    "position": 0,
                    "source": "test",
                },
                {
                    "passage_id": "2_0",
                    "article_id": 2,
                    "title": "Olympic Games",
                    "text": "b",
                    "position": 0,
                    "source": "test",
                },
                {
                    "passage_id": "3_0",
                    "article_id": 3,
                    "title": "Lonely article",
                    "text": "c",
                    "position": 0,
                    "source": "test",
                },
            ],
            source="test",
        )
        tx.replace_source("questions", "test-questions")
        tx.write(
            "questions",
            [
                {"question_id": f"q{i}", "dataset": "toy", "split": "dev", "question": f"question {i}?", "answers": ["x"],
                 "positive_ids": pos, "hard_negative_ids": [], "domains": None}
                for i, pos in enumerate(positives)
            ],
            source="test-questions",
        )  # fmt: skip


def test_ingest_label_report_and_noop(cli, tmp_path: Path) -> None:
    ws_dir = tmp_path / "ws"
    page, links = write_dumps(tmp_path)
    first = cli(
        "--workspace", str(ws_dir), "ingest", "categories", "--page", str(page), "--categorylinks", str(links)
    )
    assert "category_links_written: 8" in first.output
    assert "articles_written: 10" in first.output  # 4 article pages + 6 category pages
    again = cli(
        "--workspace", str(ws_dir), "ingest", "categories", "--page", str(page), "--categorylinks", str(links)
    )
    assert "no-op" in again.output

    add_passages_and_questions(ws_dir, [["1_0"], ["1_0", "2_0"], ["3_0"]])
    labelled = cli("--workspace", str(ws_dir), "label", "domains")
    assert "labelled articles:  2/3 (66.67%)" in labelled.output
    assert "labelled questions: 2/3 (66.67%)" in labelled.output
    assert "toy: labelled questions 2/3" in labelled.output

    ws = Workspace.resolve(ws_dir)
    domains = ws.sql("SELECT title, domain, depth FROM domains ORDER BY title, domain").to_pylist()
    assert domains == [
        {"title": "Albert Einstein", "domain": "Science", "depth": 3},
        {"title": "Olympic Games", "domain": "Sports", "depth": 2},
    ]
    questions = ws.sql("SELECT question_id, domains FROM questions ORDER BY question_id").to_pylist()
    assert questions == [
        {"question_id": "q0", "domains": ["Science"]},
        {"question_id": "q1", "domains": ["Science", "Sports"]},
        {"question_id": "q2", "domains": []},
    ]
    query = "SELECT metric, value FROM metrics WHERE run = 'label-domains' AND dataset = 'toy' AND \"group\" IS NULL"
    metrics = {r["metric"]: r["value"] for r in ws.sql(query).to_pylist()}
    assert metrics["labelled_questions"] == 2.0 and metrics["avg_labels_per_question"] == 1.5
    assert (ws.root / "plots" / "domain_coverage.png").read_bytes()[:4] == b"\x89PNG"

    assert "no-op" in cli("--workspace", str(ws_dir), "label", "domains").output
    # New positives -> the stage runs again and relabels.
    add_passages_and_questions(ws_dir, [["2_0"]])
    relabelled = cli("--workspace", str(ws_dir), "label", "domains")
    assert "no-op" not in relabelled.output
    assert ws.sql("SELECT domains FROM questions").to_pylist() == [{"domains": ["Sports"]}]


def test_domain_file_and_max_depth(cli, tmp_path: Path) -> None:
    ws_dir = tmp_path / "ws"
    page, links = write_dumps(tmp_path)
    cli(
        "--workspace", str(ws_dir), "ingest", "categories", "--page", str(page), "--categorylinks", str(links)
    )
    domains_file = tmp_path / "domains.txt"
    domains_file.write_text("Physics\nSports\n", encoding="utf-8")
    cli("--workspace", str(ws_dir), "label", "domains", "--domains", str(domains_file), "--max-depth", "1")
    ws = Workspace.resolve(ws_dir)
    assert ws.sql("SELECT title, domain, depth FROM domains").to_pylist() == []  # nearest are at depth 2
    cli("--workspace", str(ws_dir), "label", "domains", "--domains", str(domains_file), "--max-depth", "2")
    rows = ws.sql("SELECT title, domain, depth FROM domains ORDER BY title").to_pylist()
    assert rows == [
        {"title": "Albert Einstein", "domain": "Physics", "depth": 2},
        {"title": "Olympic Games", "domain": "Sports", "depth": 2},
    ]


def test_corrupt_dump_fails_cleanly_or_is_skipped(cli, tmp_path: Path) -> None:
    ws_dir = tmp_path / "ws"
    good_page, good_links = write_dumps(tmp_path)
    cli(
        "--workspace",
        str(ws_dir),
        "ingest",
        "categories",
        "--page",
        str(good_page),
        "--categorylinks",
        str(good_links),
    )
    bad = tmp_path / "bad"
    bad.mkdir()
    page, links = write_dumps(bad, links=LINKS[:2], corrupt=True)
    failed = cli(
        "--workspace",
        str(ws_dir),
        "ingest",
        "categories",
        "--page",
        str(page),
        "--categorylinks",
        str(links),
        ok=False,
    )
    assert failed.exit_code == 1
    assert "categorylinks.sql.gz: byte" in failed.output
    ws = Workspace.resolve(ws_dir)
    assert ws.rows("category_links") == 8  # what the good ingest wrote is intact
    skipped = cli(
        "--workspace",
        str(ws_dir),
        "ingest",
        "categories",
        "--page",
        str(page),
        "--categorylinks",
        str(links),
        "--skip-bad",
    )
    assert "categorylinks_skipped_statements: 1" in skipped.output
    assert ws.rows("category_links") == 2
    assert pa.compute.sum(ws.read_table("category_links").column("page_id")).as_py() == 2


def test_bundled_sample_sql_dumps(cli, tmp_path: Path) -> None:
    ws_dir = tmp_path / "ws"
    sql = SAMPLE_DIR / "sql"
    ingest = cli(
        "--workspace", str(ws_dir), "ingest", "categories",
        "--page", str(sql / "page.sql.gz"),
        "--categorylinks", str(sql / "categorylinks.sql.gz"),
        "--linktarget", str(sql / "linktarget.sql.gz"),
        "--redirect", str(sql / "redirect.sql.gz"),
    )  # fmt: skip
    assert "schema: cl_target_id" in ingest.output and "redirect_targets: 16" in ingest.output
    labelled = cli("--workspace", str(ws_dir), "label", "domains")
    assert "labelled articles:  50/50 (100.00%)" in labelled.output
    assert "labels_redirects_labelled: 15" in labelled.output


def test_label_without_category_links_says_what_to_do(cli, tmp_path: Path) -> None:
    from odqa.storage import Workspace

    ws = Workspace.resolve(tmp_path / "ws")  # a workspace, but without category links
    result = cli("--workspace", str(ws.root), "label", "domains", ok=False)
    assert result.exit_code == 1
    assert "odqa ingest categories" in result.output
