"""DPR's rule for positives by distant supervision, on a fixture worked out by hand: per question,
the highest-ranked passage of the retriever's top passages whose *text* contains an answer under
DPR's has_answer (tokens, case, NFD; the title does not count); none when no such passage is in
the ranking (DPR discarded such questions). Only questions without positives of their own get
derived ones; derived ones are derived again."""

from __future__ import annotations

import pyarrow as pa
import pytest

from odqa.pipelines.evaluation.answers import AnswerMatcher
from odqa.pipelines.evaluation.metrics import derived_judgments
from odqa.pipelines.retrieval.distant_positives import needs_positives, select_distant_positives

TEXTS = {
    "p-title": "A river crosses the old town.",  # its title is "Paris": a title is not the passage's text
    "p-parisian": "The Parisian metro opened in 1900.",  # "Parisian" is one token: no "paris" in it
    "p-paris": "Its capital, Paris, lies on the Seine.",
    "p-again": "Paris has twenty arrondissements.",
    "p-cafe": "Le Cafe\u0301 de Flore is a coffeehouse.",  # decomposed é: NFD makes it equal to "Café"
    "p-none": "Nothing of interest here.",
}
RUN = [  # (question, passage, rank): the retriever's ranking, best first
    ("q-capital", "p-title", 1), ("q-capital", "p-parisian", 2), ("q-capital", "p-paris", 3),
    ("q-capital", "p-again", 4),
    ("q-cafe", "p-none", 1), ("q-cafe", "p-cafe", 2),
    ("q-lost", "p-none", 1), ("q-lost", "p-title", 2),
]  # fmt: skip
QUESTIONS = pa.table({"question_id": ["q-capital", "q-cafe", "q-lost", "q-unranked"],
                      "answers": [["PARIS"], ["Café"], ["Atlantis"], ["Paris"]]})  # fmt: skip


def _run() -> pa.Table:
    return pa.table({"question_id": [q for q, _, _ in RUN], "passage_id": [p for _, p, _ in RUN],
                     "rank": pa.array([r for _, _, r in RUN], pa.int32()), "score": [1.0] * len(RUN)})  # fmt: skip


def _positives(count: int) -> dict[str, list[str]]:
    chosen = select_distant_positives(_run(), QUESTIONS, AnswerMatcher(TEXTS), count=count)
    return dict(zip(chosen["question_id"].to_pylist(), chosen["positive_ids"].to_pylist(), strict=True))


def test_the_highest_ranked_passage_whose_text_holds_an_answer_is_the_positive() -> None:
    assert _positives(count=1) == {"q-capital": ["p-paris"], "q-cafe": ["p-cafe"], "q-lost": [], "q-unranked": []}


def test_more_positives_are_the_next_answer_bearing_passages_in_rank_order() -> None:
    assert _positives(count=2)["q-capital"] == ["p-paris", "p-again"]
    assert _positives(count=3)["q-capital"] == ["p-paris", "p-again"]  # no third one in the ranking
    with pytest.raises(ValueError, match="between 1 and 10"):
        _positives(count=0)


def test_only_questions_without_positives_of_their_own_are_given_derived_ones() -> None:
    assert needs_positives([], None) and needs_positives(None, None)  # answer-only
    assert not needs_positives(["gold"], None)  # gold positives are never replaced
    assert needs_positives(["derived"], "bm25")  # derived before: derived again


def test_judgments_from_derived_positives_are_counted_by_what_derived_them() -> None:
    questions = pa.table({"positive_ids": [["a"], ["b"], [], ["c"]], "positives_from": ["bm25", None, None, "bm25"]})
    assert derived_judgments(questions) == {"bm25": 2}
    assert derived_judgments(questions.drop(["positives_from"])) == {}


def test_evaluate_says_which_judgments_were_derived() -> None:
    from odqa.flows.stages.evaluate import split_summary

    split = {"dataset": "squad", "split": "dev", "questions": 300, "questions_with_answers": 300,
             "questions_judged": 296, "qrels_source": "positive_ids", "qrels_derived": {"bm25": 296}}  # fmt: skip
    assert split_summary(split) == ("300 questions, 300 with answers (answer match), 296 judged (relevance "
                                 "from positive_ids; 296 of them derived from their answers by bm25 (odqa positives))")
