"""Positive passages by distant supervision: DPR's rule for question sets that bring only answers.

DPR (Karpukhin et al. 2020, section 4.1, "Selection of positive passages") had only question and
answer pairs for TriviaQA, WebQuestions and CuratedTREC. It took as a question's positive the
highest-ranked BM25 passage that contains an answer, and discarded the question when none of the
top 100 did; its trainer then uses the first positive of a question (`positive_ctxs[0]`). The
same rule here runs over any retriever's ranking (BM25, or a dense model's): per question, the
first ``count`` passages of its top ``depth`` whose *text* contains an answer under DPR's
`has_answer` (`pipelines.evaluation.answers`, the rule answer-based R@K uses). So a question gets
a positive exactly when the retriever's R@depth counts it as a hit, and a question without one
keeps none: training skips it, as DPR discarded it.

Only questions without a positive of their own are given derived ones: gold positives are never
replaced, while positives derived earlier are derived again (another depth, index or model).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from ..evaluation.answers import AnswerMatcher
from ..progress import track
from .runs import ranked_lists

DPR_DEPTH = 100  # DPR: a question with no answer-bearing passage in BM25's top 100 is discarded
DPR_COUNT = 1  # DPR trains on the highest-ranked one
MAX_DERIVED_POSITIVES = 10

DERIVED_POSITIVES_SCHEMA = pa.schema(
    [
        pa.field("question_id", pa.string(), nullable=False),
        pa.field("positive_ids", pa.list_(pa.string()), nullable=False),
    ]
)


def needs_positives(positive_ids: Sequence[str] | None, positives_from: str | None) -> bool:
    """Whether distant supervision gives a question its positives: it has none of its own (no
    positive ids), or the ones it has were derived before (``positives_from`` names how)."""
    return positives_from is not None or not positive_ids


def select_distant_positives(run: pa.Table, questions: pa.Table, matcher: AnswerMatcher, *,
                             count: int = DPR_COUNT) -> pa.Table:  # fmt: skip
    """Per question of ``questions`` (question_id, answers): the first ``count`` passages of its
    ranking in ``run`` (best rank first) that contain one of its answers; an empty list when none
    does or the run has no rows for it. The matcher decides "contains an answer" and should hold
    the passages' texts without their titles, as DPR's evaluation matches them."""
    if not 1 <= count <= MAX_DERIVED_POSITIVES:
        raise ValueError(f"derived positives per question must be between 1 and {MAX_DERIVED_POSITIVES}, got {count}")
    ranked = ranked_lists(run)
    qids = questions["question_id"].cast(pa.string()).to_pylist()
    answers = questions["answers"].to_pylist()
    chosen: list[list[str]] = []
    for qid, question_answers in track(zip(qids, answers, strict=True), "distant positives", "questions",
                                       total=len(qids)):  # fmt: skip
        found = matcher.first(ranked.get(qid, []), question_answers or [], count, containing=True)
        chosen.append([str(pid) for pid in found])
    return pa.table([qids, chosen], schema=DERIVED_POSITIVES_SCHEMA)
