"""Query domain labels and the DESIRE-ME Table 1 style coverage report.

A question's domains are the union of the domains of the articles that hold its positive
passages (DESIRE-ME 4.1: several relevant pages -> all their categories). Passages name their
article by title, so the join is passage_id -> title -> domains; titles are normalized on both
sides so "Foo_bar" and "Foo bar" meet.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...storage.atomic import atomic_write
from .titles import normalize_titles

__all__ = [
    "CoverageReport",
    "assign_question_domains",
    "coverage_report",
    "plot_domain_counts",
    "positive_passage_domains",
    "question_domains",
]

QUESTION_DOMAINS_SCHEMA = pa.schema([("question_id", pa.string()), ("domains", pa.list_(pa.string()))])


def _batches(rows: pa.Table | Iterable[pa.RecordBatch], columns: list[str]) -> Iterable[pa.RecordBatch]:
    if isinstance(rows, pa.Table):
        return rows.select(columns).to_batches()
    return (b.select(columns) for b in rows)


def _title_domains(domains: pa.Table, order: Sequence[str]) -> tuple[pa.Array, list[list[str]]]:
    """Distinct normalized titles and, per title, its domains in `order`."""
    rank = {d: i for i, d in enumerate(order)}
    titles = normalize_titles(domains.column("title"))
    grouped = (
        pa.table({"title": titles, "domain": domains.column("domain")})
        .group_by("title", use_threads=False)
        .aggregate([("domain", "distinct")])
    )
    lists = [
        sorted(ds, key=lambda d: (rank.get(d, len(rank)), d))
        for ds in grouped.column("domain_distinct").to_pylist()
    ]
    return grouped.column("title").combine_chunks(), lists


def positive_passage_domains(
    positive_ids: pa.Array | pa.ChunkedArray,
    passages: pa.Table | Iterable[pa.RecordBatch],
    domains: pa.Table,
    domain_order: Sequence[str] = (),
) -> dict[str, list[str]]:
    """passage_id -> its article's domains, for the given (positive) passage ids only.

    `passages`: passage_id, title, streamed in batches (21M rows for DPR's Wikipedia: only the
    rows of wanted passages are kept). Passages whose article has no label are absent.
    """
    positive_ids = positive_ids.cast(pa.string())
    wanted = pc.unique(positive_ids) if len(positive_ids) else pa.array([], pa.string())
    kept_ids: list[pa.Array] = []
    kept_titles: list[pa.Array] = []
    for batch in _batches(passages, ["passage_id", "title"]):
        ids = batch.column("passage_id").cast(pa.string())
        hit = pc.is_in(ids, value_set=wanted)
        kept_ids.append(pc.filter(ids, hit))
        kept_titles.append(pc.filter(batch.column("title"), hit))
    if not kept_ids:
        return {}
    passage_ids = pa.chunked_array(kept_ids, pa.string()).combine_chunks()
    passage_titles = normalize_titles(pa.chunked_array(kept_titles, pa.string()))
    titles, title_lists = _title_domains(domains, domain_order)
    title_index = pc.index_in(passage_titles, value_set=titles).fill_null(-1).to_numpy(zero_copy_only=False)
    return {
        pid: title_lists[t] for pid, t in zip(passage_ids.to_pylist(), title_index, strict=True) if t >= 0
    }


def assign_question_domains(
    positive_ids: pa.Array | pa.ChunkedArray,
    passage_domains: dict[str, list[str]],
    domain_order: Sequence[str] = (),
) -> pa.Array:
    """Per question (a list of positive passage ids), the union of its passages' domains,
    in `domain_order` (then by name); an empty list when none of its passages is labelled."""
    rank = {d: i for i, d in enumerate(domain_order)}
    out = []
    for pos in positive_ids.to_pylist():
        found: set[str] = set()
        for pid in pos or ():
            found.update(passage_domains.get(str(pid), ()))
        out.append(sorted(found, key=lambda d: (rank.get(d, len(rank)), d)))
    return pa.array(out, pa.list_(pa.string()))


def question_domains(
    questions: pa.Table,
    passages: pa.Table | Iterable[pa.RecordBatch],
    domains: pa.Table,
    domain_order: Sequence[str] = (),
) -> pa.Table:
    """(question_id, domains) for every question: the union of the domains of the articles of
    its positive passages (DESIRE-ME 4.1). `questions`: question_id, positive_ids."""
    positives = questions.column("positive_ids")
    mapping = positive_passage_domains(pc.list_flatten(positives), passages, domains, domain_order)
    return pa.table(
        {
            "question_id": questions.column("question_id").cast(pa.string()),
            "domains": assign_question_domains(positives, mapping, domain_order),
        },
        schema=QUESTION_DOMAINS_SCHEMA,
    )


@dataclass
class CoverageReport:
    """The figures of DESIRE-ME's Table 1 (labelled docs/queries, average labels) and more."""

    articles: int = 0
    labelled_articles: int = 0
    passages: int = 0
    labelled_passages: int = 0
    questions: int = 0
    labelled_questions: int = 0
    avg_labels_per_question: float = 0.0  # over labelled questions, as DESIRE-ME's "Avg labels"
    articles_per_domain: dict[str, int] = field(default_factory=dict)
    questions_per_domain: dict[str, int] = field(default_factory=dict)

    @property
    def labelled_article_share(self) -> float:
        return self.labelled_articles / self.articles if self.articles else math.nan

    @property
    def labelled_passage_share(self) -> float:
        return self.labelled_passages / self.passages if self.passages else math.nan

    @property
    def labelled_question_share(self) -> float:
        return self.labelled_questions / self.questions if self.questions else math.nan

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            labelled_article_share=self.labelled_article_share,
            labelled_passage_share=self.labelled_passage_share,
            labelled_question_share=self.labelled_question_share,
        )
        return out

    def metrics(self) -> list[tuple[str, float, str | None]]:
        """(metric, value, group) rows for the `metrics` table; group = domain for per-domain counts."""
        rows: list[tuple[str, float, str | None]] = [
            ("articles", float(self.articles), None),
            ("labelled_articles", float(self.labelled_articles), None),
            ("labelled_article_share", self.labelled_article_share, None),
            ("passages", float(self.passages), None),
            ("labelled_passages", float(self.labelled_passages), None),
            ("labelled_passage_share", self.labelled_passage_share, None),
            ("questions", float(self.questions), None),
            ("labelled_questions", float(self.labelled_questions), None),
            ("labelled_question_share", self.labelled_question_share, None),
            ("avg_labels_per_question", self.avg_labels_per_question, None),
        ]
        rows += [("articles_per_domain", float(n), d) for d, n in self.articles_per_domain.items()]
        rows += [("questions_per_domain", float(n), d) for d, n in self.questions_per_domain.items()]
        return rows

    def format(self) -> str:
        """A printable summary: Table 1's columns plus the per-domain counts."""

        def share(x: float) -> str:
            return "n/a" if math.isnan(x) else f"{100 * x:.2f}%"

        lines = [
            f"labelled articles:  {self.labelled_articles}/{self.articles} ({share(self.labelled_article_share)})",
            f"labelled passages:  {self.labelled_passages}/{self.passages} ({share(self.labelled_passage_share)})",
            f"labelled questions: {self.labelled_questions}/{self.questions} ({share(self.labelled_question_share)})",
            f"avg labels per labelled question: {self.avg_labels_per_question:.2f}",
            f"{'domain':<24}{'articles':>10}{'questions':>11}",
        ]
        for d, n in self.articles_per_domain.items():
            lines.append(f"{d:<24}{n:>10}{self.questions_per_domain.get(d, 0):>11}")
        return "\n".join(lines)


def coverage_report(
    domains: pa.Table,
    domain_order: Sequence[str],
    *,
    articles: pa.Array | None = None,
    passages: pa.Table | Iterable[pa.RecordBatch] | None = None,
    question_labels: pa.Table | None = None,
) -> CoverageReport:
    """Coverage of the labels over articles, passages and questions.

    `articles`: titles of the articles to count (non-redirect pages; default: the labelled titles
    only, which makes the share 100% and is rarely what you want). `passages`: rows with a title
    column. `question_labels`: `question_domains` output.
    """
    report = CoverageReport()
    labelled = (
        pc.unique(normalize_titles(domains.column("title")))
        if domains.num_rows
        else pa.array([], pa.string())
    )
    if articles is not None:
        titles = pc.unique(normalize_titles(articles.drop_null()))
        report.articles = len(titles)
        report.labelled_articles = int(pc.sum(pc.is_in(titles, value_set=labelled)).as_py() or 0)
        counted = domains.filter(pc.is_in(normalize_titles(domains.column("title")), value_set=titles))
    else:
        report.articles = report.labelled_articles = len(labelled)
        counted = domains
    per_domain = (
        pa.table({"title": normalize_titles(counted.column("title")), "domain": counted.column("domain")})
        .group_by("domain", use_threads=False)
        .aggregate([("title", "count_distinct")])
    )
    found = dict(
        zip(
            per_domain.column("domain").to_pylist(),
            per_domain.column("title_count_distinct").to_pylist(),
            strict=True,
        )
    )
    report.articles_per_domain = {d: int(found.get(d, 0)) for d in domain_order}

    if passages is not None:
        for batch in _batches(passages, ["title"]):
            report.passages += batch.num_rows
            hit = pc.is_in(normalize_titles(batch.column("title")), value_set=labelled)
            report.labelled_passages += int(pc.sum(hit).as_py() or 0)

    if question_labels is not None:
        lengths = (
            pc.list_value_length(question_labels.column("domains"))
            .fill_null(0)
            .to_numpy(zero_copy_only=False)
        )
        report.questions = len(lengths)
        report.labelled_questions = int((lengths > 0).sum())
        report.avg_labels_per_question = (
            float(lengths[lengths > 0].mean()) if report.labelled_questions else 0.0
        )
        flat = pc.list_flatten(question_labels.column("domains")).to_pylist()
        counts = {d: 0 for d in domain_order}
        for d in flat:
            counts[d] = counts.get(d, 0) + 1
        report.questions_per_domain = counts
    return report


def plot_domain_counts(report: CoverageReport, path: str | Path, title: str = "Domain labels") -> Path:
    """Bar chart of articles (and questions, when there are any) per domain, written as PNG.

    Written to a temporary name and renamed, so a reader never sees half a file.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    names = list(report.articles_per_domain)
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(8.0, 0.32 * len(names) + 2), 4.5))
    try:
        with_questions = report.questions > 0
        width = 0.4 if with_questions else 0.8
        ax.bar(
            x - (width / 2 if with_questions else 0),
            [report.articles_per_domain[n] for n in names],
            width,
            label="articles",
        )
        if with_questions:
            ax.bar(
                x + width / 2,
                [report.questions_per_domain.get(n, 0) for n in names],
                width,
                label="questions",
            )
        ax.set_xticks(x, names, rotation=70, ha="right", fontsize=8)
        ax.set_ylabel("count")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=110))
    finally:
        plt.close(fig)
    return path
