"""Scoring one run on one dataset split: answer-based R@K and, where there are judgments, qrels metrics.

A run is scored over *all* questions of the split (a question the run has no rows for counts as
a miss, as in DPR's evaluation). Answer-based R@K matches the passages' text only, as DPR does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .answers import AnswerMatcher, MatchMode
from .metrics import (
    DEFAULT_QRELS_METRICS,
    MetricValue,
    first_hit_ranks,
    mean_scores,
    per_question_hits,
    qrels_scores,
    recall_at_k,
    recall_curve,
)


@dataclass
class SplitScores:
    """One run scored on one dataset split."""

    dataset: str
    split: str
    questions: int
    match: str
    values: list[MetricValue] = field(default_factory=list)
    per_question: dict[str, dict[str, float]] = field(default_factory=dict)
    curve: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)


class _TextsWithMissing(dict):
    """Passage texts where an unknown passage id reads as empty text (it contains no answer)."""

    def __missing__(self, key: str) -> str:
        return ""


def score_split(rows: pa.Table, questions: pa.Table, *, dataset: str, split: str, ks: Sequence[int],
                mode: MatchMode, passage_texts: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]],
                qrels_source: str, passages_missing: int = 0) -> SplitScores:  # fmt: skip
    """Score run `rows` (question_id, passage_id, rank, score) on the split's `questions`
    (question_id, answers, relation, positive_ids) and relevance judgments `qrels`."""
    scores = SplitScores(dataset, split, questions.num_rows, mode, info={"passages_missing": passages_missing})
    if any(questions.column("answers").to_pylist()):
        # passages of the run that are not in the passages table can hold no answer
        first = first_hit_ranks(rows, questions, AnswerMatcher(_TextsWithMissing(passage_texts), mode=mode))
        scores.values += recall_at_k(first, tuple(ks))
        scores.per_question.update(per_question_hits(first, tuple(ks)))
        scores.curve = recall_curve(first, max(max(ks), int(pc.max(rows["rank"]).as_py())))
        scores.info["questions_with_answers"] = first.num_rows
    if qrels:
        per_question = qrels_scores(rows, qrels, DEFAULT_QRELS_METRICS)
        scores.values += mean_scores(per_question)
        scores.per_question.update(per_question)
        scores.info.update({"qrels_source": qrels_source, "questions_judged": len(qrels)})
    if not scores.values:
        raise ValueError(f"{dataset}/{split} has neither answers nor relevance judgments to evaluate against")
    return scores
