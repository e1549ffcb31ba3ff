"""BM25 hard negatives, DPR's recipe: the best-ranked BM25 passages that hold no answer.

DPR trains with one such passage per question (section 3.2 of the DPR paper); TASER and the
dual-encoder studies reuse them. A passage is a hard negative for a question when it ranks high
for the question's words yet contains none of its answers (under the same `has_answer` rules as
evaluation) and is not one of the question's gold positives.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa

from ..evaluation.answers import AnswerMatcher
from ..progress import track
from .runs import ranked_lists

MAX_HARD_NEGATIVES = 30

HARD_NEGATIVES_SCHEMA = pa.schema(
    [
        pa.field("question_id", pa.string(), nullable=False),
        pa.field("hard_negative_ids", pa.list_(pa.string()), nullable=False),
    ]
)

# What one index and parameters found, kept by question content (`negatives_keys`) to be reused.
SEARCHED_NEGATIVES_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("hard_negative_ids", pa.list_(pa.string()), nullable=False),
    ]
)


def negatives_keys(questions: pa.Table) -> list[str]:
    """Per question, a key of everything its BM25 negatives depend on besides the index and the
    parameters: its text, answers and positives (not its id). Copies of one question under other
    ids and splits (a recipe's training copies, one per architecture) share the key, so their
    negatives are searched once and reused."""
    columns = [questions[name].to_pylist() for name in ("question", "answers", "positive_ids")]
    return [hashlib.sha256(json.dumps([text, answers or [], sorted(positives or [])]).encode("utf-8")).hexdigest()
            for text, answers, positives in zip(*columns, strict=True)]  # fmt: skip


def select_hard_negatives(
    run: pa.Table, questions: pa.Table, matcher: AnswerMatcher, *, count: int = 1
) -> pa.Table:
    """Per question: up to ``count`` passages from the run, best rank first, with no answer.

    ``questions`` needs ``question_id`` and ``answers``; ``positive_ids`` is honoured when
    present. The matcher decides "contains an answer" and should see what a reader of the
    passage sees (title and text), so that no negative gives the answer away. A question whose
    run yields fewer clean passages gets fewer negatives (possibly none); questions absent from
    the run get an empty list, so every question in ``questions`` has a row.
    """
    if not 1 <= count <= MAX_HARD_NEGATIVES:
        raise ValueError(f"hard negative count must be between 1 and {MAX_HARD_NEGATIVES}, got {count}")
    ranked = ranked_lists(run)
    qids = questions["question_id"].cast(pa.string()).to_pylist()
    answers = questions["answers"].to_pylist()
    positives = (
        questions["positive_ids"].to_pylist()
        if "positive_ids" in questions.column_names
        else [None] * len(qids)
    )
    negatives: list[list[str]] = []
    rows = zip(qids, answers, positives, strict=True)
    for qid, question_answers, question_positives in track(rows, "BM25 negatives", "questions", total=len(qids)):
        excluded = {str(p) for p in question_positives or ()}
        candidates = [pid for pid in ranked.get(qid, []) if str(pid) not in excluded]
        chosen = matcher.first(candidates, question_answers or [], count, containing=False)
        negatives.append([str(pid) for pid in chosen])
    return pa.table([qids, negatives], schema=HARD_NEGATIVES_SCHEMA)
