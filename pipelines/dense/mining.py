"""Iterative hard-negative mining (TASER section 3.3 / appendix B, after DPR).

A hard negative is a passage the current retriever ranks high that does *not* answer the
question. Gold passages and every passage containing one of the answers (DPR's ``has_answer``)
are excluded: an answer-bearing passage used as a negative teaches the model to push away
correct evidence, the most harmful kind of label noise in contrastive training.

Rounds, as in TASER:

* round 1 trains with ``P1``: the top BM25 passage without the answer (DPR's hard negative,
  ``mine_hard_negatives(bm25_run, ..., num_negatives=1)``) plus in-batch negatives (the
  trainer's job: other questions' positives in the same mini-batch);
* round 2 mines ``P2`` from the round-1 model's top-100 and trains the final model with
  ``P1 ∪ P2`` (single-set training) or with ``P2`` only (multi-set training, for efficiency).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ...storage.choices import TRAINING_MODES, TrainingMode
from ..evaluation.answers import AnswerMatcher, MatchMode
from ..progress import track

NEGATIVES_SCHEMA = pa.schema([("question_id", pa.string()), ("hard_negative_ids", pa.list_(pa.string()))])


@dataclass(frozen=True)
class MiningResult:
    negatives: pa.Table  # question_id, hard_negative_ids (best-ranked first)
    excluded_gold: int  # retrieved gold passages left out
    excluded_answer: int  # retrieved passages left out because they contain an answer
    without_negatives: int  # questions for which nothing was left
    unknown_questions: int  # run questions missing from the questions table (skipped)


def _ordered_run(run: pa.Table, depth: int) -> dict[str, list[str]]:
    """question_id -> passage ids best first, cut at ``depth`` (by rank, else by score)."""
    missing = {"question_id", "passage_id"} - set(run.column_names)
    if missing or not ({"rank", "score"} & set(run.column_names)):
        raise ValueError(f"run lacks column(s) {sorted(missing) or ['rank or score']}; expected question_id, "
                         "passage_id and rank or score")
    qids = run.column("question_id").to_numpy(zero_copy_only=False)
    key = run.column("rank").to_numpy() if "rank" in run.column_names else -run.column("score").to_numpy()
    order = np.lexsort((key, qids))
    pids = run.column("passage_id").to_pylist()
    ranked: dict[str, list[str]] = {}
    for i in order:
        lst = ranked.setdefault(qids[i], [])
        if len(lst) < depth:
            lst.append(pids[i])
    return ranked


def mine_hard_negatives(
    run: pa.Table,
    questions: pa.Table,
    passage_texts: Mapping[str, str],
    *,
    num_negatives: int | None = None,
    depth: int = 100,
    mode: MatchMode = "string",
) -> MiningResult:
    """Hard negatives from a run: its top ``depth`` minus gold and answer-bearing passages.

    ``questions`` needs question_id, answers and positive_ids (null = none); ``passage_texts``
    maps every retrieved passage id to its text. ``num_negatives`` keeps the best N (None: all).
    """
    needed = {"question_id", "answers", "positive_ids"} - set(questions.column_names)
    if needed:
        raise ValueError(f"questions lack column(s) {sorted(needed)}")
    answers = dict(zip(questions.column("question_id").to_pylist(), questions.column("answers").to_pylist(),
                       strict=True))
    gold = dict(zip(questions.column("question_id").to_pylist(), questions.column("positive_ids").to_pylist(),
                    strict=True))
    matcher = AnswerMatcher(passage_texts, mode)
    out_q: list[str] = []
    out_neg: list[list[str]] = []
    excluded_gold = excluded_answer = without = unknown = 0
    ordered = _ordered_run(run, depth)
    for qid, ranked in track(ordered.items(), "mine negatives", "questions", total=len(ordered)):
        if qid not in answers:
            unknown += 1
            continue
        positives = set(gold[qid] or ())
        question_answers = answers[qid] or []
        negatives = []
        for pid in ranked:
            if pid in positives:
                excluded_gold += 1
            elif matcher.has_answer(pid, question_answers):
                excluded_answer += 1
            else:
                negatives.append(pid)
                if num_negatives is not None and len(negatives) == num_negatives:
                    break
        if not negatives:
            without += 1
        out_q.append(qid)
        out_neg.append(negatives)
    table = pa.table({"question_id": out_q, "hard_negative_ids": out_neg}, schema=NEGATIVES_SCHEMA)
    return MiningResult(table, excluded_gold, excluded_answer, without, unknown)


def union_negatives(first: pa.Table, second: pa.Table) -> pa.Table:
    """Per question: ``first``'s negatives, then ``second``'s not already listed (order kept)."""
    merged: dict[str, list[str]] = {}
    for table in (first, second):
        for qid, negs in zip(table.column("question_id").to_pylist(), table.column("hard_negative_ids").to_pylist(),
                             strict=True):
            listed = merged.setdefault(qid, [])
            seen = set(listed)
            for pid in negs or ():
                if pid not in seen:
                    seen.add(pid)
                    listed.append(pid)
    return pa.table({"question_id": list(merged), "hard_negative_ids": list(merged.values())},
                    schema=NEGATIVES_SCHEMA)


def round_negatives(
    round_number: int, mode: TrainingMode, bm25_negatives: pa.Table, mined_negatives: pa.Table | None = None
) -> pa.Table:
    """The hard negatives a training round uses (TASER appendix B).

    Round 1: ``P1`` (BM25; in-batch negatives are added by the trainer). Round 2 and later:
    ``P1 ∪ P2`` for single-set training, ``P2`` only for multi-set training, where ``P2`` was
    mined with the previous round's model.
    """
    if mode not in TRAINING_MODES:
        raise ValueError(f"training mode must be one of {TRAINING_MODES}, got {mode!r}")
    if round_number < 1:
        raise ValueError(f"rounds start at 1, got {round_number}")
    if round_number == 1:
        return bm25_negatives
    if mined_negatives is None:
        raise ValueError(f"round {round_number} needs negatives mined with the round {round_number - 1} model")
    return union_negatives(bm25_negatives, mined_negatives) if mode == "single-set" else mined_negatives
