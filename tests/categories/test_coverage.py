"""Question labels (union over positive passages' articles) and the coverage report."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

from odqa.pipelines.categories.coverage import coverage_report, plot_domain_counts, question_domains

ORDER = ("Science", "History", "Sports")
DOMAINS = pa.table(
    {
        "title": ["Albert Einstein", "Albert Einstein", "Olympic Games", "Newton"],
        "domain": ["Science", "History", "Sports", "Science"],
        "depth": pa.array([2, 2, 1, 3], pa.int32()),
    }
)
PASSAGES = pa.table(
    {
        "passage_id": ["e0", "e1", "o0", "n0", "x0", "x1"],
        "title": [
            "Albert_Einstein",
            "Albert Einstein",
            "Olympic Games",
            "Newton",
            "Unlabelled page",
            "Unlabelled page",
        ],
    }
)
QUESTIONS = pa.table(
    {
        "question_id": ["q1", "q2", "q3", "q4", "q5"],
        "positive_ids": [["e0"], ["o0", "n0"], ["x0"], [], ["e1", "o0", "missing"]],
    }
)


def test_question_domains_are_the_union_over_positive_passages() -> None:
    labels = question_domains(QUESTIONS, PASSAGES, DOMAINS, ORDER)
    assert labels.to_pylist() == [
        {"question_id": "q1", "domains": ["Science", "History"]},
        {"question_id": "q2", "domains": ["Science", "Sports"]},
        {"question_id": "q3", "domains": []},
        {"question_id": "q4", "domains": []},
        {"question_id": "q5", "domains": ["Science", "History", "Sports"]},
    ]
    streamed = question_domains(QUESTIONS, PASSAGES.to_batches(max_chunksize=2), DOMAINS, ORDER)
    assert streamed.equals(labels)


def test_coverage_figures_by_hand() -> None:
    labels = question_domains(QUESTIONS, PASSAGES, DOMAINS, ORDER)
    articles = pa.array(["Albert Einstein", "Olympic Games", "Newton", "Unlabelled page"])
    report = coverage_report(DOMAINS, ORDER, articles=articles, passages=PASSAGES, question_labels=labels)
    assert (report.articles, report.labelled_articles) == (4, 3)
    assert report.labelled_article_share == pytest.approx(0.75)
    assert (report.passages, report.labelled_passages) == (6, 4)
    assert (report.questions, report.labelled_questions) == (5, 3)
    assert report.avg_labels_per_question == pytest.approx((2 + 2 + 3) / 3)
    assert report.articles_per_domain == {"Science": 2, "History": 1, "Sports": 1}
    assert report.questions_per_domain == {"Science": 3, "History": 2, "Sports": 2}
    metrics = {(m, g): v for m, v, g in report.metrics()}
    assert metrics[("labelled_question_share", None)] == pytest.approx(0.6)
    assert metrics[("questions_per_domain", "Sports")] == 2.0
    text = report.format()
    assert "labelled questions: 3/5 (60.00%)" in text and "Science" in text


def test_empty_inputs_do_not_divide_by_zero() -> None:
    empty = DOMAINS.slice(0, 0)
    report = coverage_report(empty, ORDER, articles=pa.array(["A"], pa.string()))
    assert report.labelled_articles == 0 and report.labelled_article_share == 0.0
    assert math.isnan(report.labelled_question_share)
    assert "n/a" in report.format()


def test_bar_chart_png(tmp_path: Path) -> None:
    labels = question_domains(QUESTIONS, PASSAGES, DOMAINS, ORDER)
    report = coverage_report(DOMAINS, ORDER, question_labels=labels)
    path = plot_domain_counts(report, tmp_path / "domains.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp"))
