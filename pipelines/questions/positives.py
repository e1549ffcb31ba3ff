"""Positive passages for template questions: answer-bearing passages of the subject's article.

A T-REx question is about its subject, so its gold passages are looked for in the subject's
Wikipedia article: the article whose title is the subject label, after following redirects
("JFK" -> "John F. Kennedy"). A passage of that article is a positive when it contains one of
the answers under DPR's normalized token match (`pipelines.evaluation.answers.has_answer`), the
rule every R@K in the thesis uses. Questions without any positive are kept (they still evaluate
retrieval over the whole corpus) and counted: the report gives, per dataset/split/relation, the
questions before and after that filter, like the thesis' Table 6.3 (52,909 -> 38,778 for T-REx
training questions).

Passages are streamed batch by batch and only those of wanted titles are looked at, so the step
works on the full 21M-passage corpus with memory proportional to the questions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..evaluation.answers import has_answer

MAX_REDIRECT_HOPS = 5  # MediaWiki itself follows one hop; double redirects are fixed by bots


def normalize_title(title: str) -> str:
    """MediaWiki title form: underscores as spaces, runs of spaces collapsed, first letter upper."""
    title = " ".join(title.replace("_", " ").split())
    return title[:1].upper() + title[1:]


def resolve_title(title: str, redirects: Mapping[str, str]) -> str:
    """Follow redirects (keys and values in normalized form) to the article a title lands on."""
    current = normalize_title(title)
    visited = {current}
    for _ in range(MAX_REDIRECT_HOPS):
        target = redirects.get(current)
        if target is None or target in visited:
            break
        current = target
        visited.add(current)
    return current


def redirect_map(articles: pa.Table | None) -> dict[str, str]:
    """Normalized title -> normalized redirect target, from `articles` rows that are redirects."""
    if articles is None or articles.num_rows == 0:
        return {}
    titles = articles.column("title").to_pylist()
    targets = articles.column("redirect_target").to_pylist()
    return {normalize_title(t): normalize_title(r) for t, r in zip(titles, targets, strict=True) if t and r}


@dataclass
class PositivesResult:
    """Questions with `positive_ids` filled, and the before/after counts per relation."""

    questions: pa.Table
    report: list[dict[str, object]]


def find_positives(
    questions: pa.Table,
    passages: Iterable[pa.RecordBatch] | pa.Table,
    articles: pa.Table | None = None,
) -> PositivesResult:
    """Fill `positive_ids` with the subject article's answer-bearing passages, in corpus order.

    `passages` needs columns passage_id, title, text; `articles` (optional) title and
    redirect_target of redirect pages.
    """
    redirects = redirect_map(articles)
    subjects = questions.column("subject").to_pylist()
    answers = questions.column("answers").to_pylist()
    wanted: dict[str, list[int]] = {}
    for index, subject in enumerate(subjects):
        if subject:
            wanted.setdefault(resolve_title(subject, redirects), []).append(index)
    positives: list[list[str]] = [[] for _ in subjects]
    has_article = [False] * len(subjects)

    batches = passages.to_batches() if isinstance(passages, pa.Table) else passages
    wanted_titles = pa.array(list(wanted), type=pa.string())
    for batch in batches:
        titles = pc.replace_substring(batch.column(batch.schema.get_field_index("title")), "_", " ")
        mask = pc.is_in(titles, value_set=wanted_titles)
        if not pc.any(mask).as_py():
            continue
        hits = batch.filter(mask)
        for passage_id, title, text in zip(
            hits.column(hits.schema.get_field_index("passage_id")).to_pylist(),
            hits.column(hits.schema.get_field_index("title")).to_pylist(),
            hits.column(hits.schema.get_field_index("text")).to_pylist(),
            strict=True,
        ):
            for index in wanted.get(normalize_title(title), ()):
                has_article[index] = True
                if answers[index] and has_answer(text or "", answers[index]):
                    positives[index].append(str(passage_id))

    filled = questions.set_column(
        questions.schema.get_field_index("positive_ids"),
        questions.schema.field("positive_ids"),
        pa.array(positives, type=questions.schema.field("positive_ids").type),
    )
    return PositivesResult(filled, _report(questions, has_article, positives))


def _report(questions: pa.Table, has_article: list[bool], positives: list[list[str]]) -> list[dict[str, object]]:
    keys = list(
        zip(
            questions.column("dataset").to_pylist(),
            questions.column("split").to_pylist(),
            questions.column("relation").to_pylist(),
            strict=True,
        )
    )
    total, with_article, with_positive = Counter(keys), Counter(), Counter()
    for key, article, found in zip(keys, has_article, positives, strict=True):
        with_article[key] += article
        with_positive[key] += bool(found)
    return [
        {
            "dataset": dataset,
            "split": split,
            "relation": relation,
            "questions": total[(dataset, split, relation)],
            "with_article": with_article[(dataset, split, relation)],
            "with_positive": with_positive[(dataset, split, relation)],
        }
        for dataset, split, relation in total
    ]
