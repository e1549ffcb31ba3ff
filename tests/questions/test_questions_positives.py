"""Positive passages: the subject's article (after redirects), DPR answer matching, the report."""

from __future__ import annotations

import pyarrow as pa

from odqa.pipelines.questions.positives import find_positives, normalize_title, resolve_title
from odqa.pipelines.questions.splits import single_split
from odqa.pipelines.questions.triples import Triple

PASSAGES = pa.table(
    {
        "passage_id": ["1", "2", "3", "4", "5", "6", "7"],
        "title": ["John F. Kennedy", "John F. Kennedy", "Brookline, Massachusetts", "Marie Curie",
                  "Marie Curie", "Pierre_Curie", "Ulm"],
        "text": [
            "Kennedy was born at 83 Beals Street in BROOKLINE, Massachusetts.",
            "He was the 35th president of the United States.",
            "Brookline is a town; John F. Kennedy was born in Brookline.",  # other article: never a positive
            "Maria Skłodowska was born in Warsaw, in the Kingdom of Poland.",
            "She moved to Paris and worked at the Sorbonne; Warszawa remembers her.",
            "Pierre Curie was born in Paris.",
            "Ulm is a city; the Parisian visitors came by train.",
        ],
    }
)
ARTICLES = pa.table(
    {
        "title": ["JFK", "Jack Kennedy", "Curie, Marie", "Loop A", "Loop B"],
        "redirect_target": ["Jack Kennedy", "John F. Kennedy", "Marie Curie", "Loop B", "Loop A"],
    }
)
TEMPLATES = {"P19": "Where was [X] born?", "P20": "Where did [X] die?"}


def _questions():
    facts = [
        Triple("JFK", "P19", "Brookline", "Q9696", "Q49142"),  # two redirect hops
        Triple("marie Curie", "P19", "Warsaw", "Q7186", "Q270", ("Warszawa",)),  # lower-case first letter
        Triple("Pierre Curie", "P19", "Paris", "Q37463", "Q90"),  # title with an underscore in the corpus
        Triple("Albert Einstein", "P19", "Ulm", "Q937", "Q3012"),  # no article in the corpus
        Triple("Ulm", "P20", "Paris", "Q3012", "Q90"),  # article exists, "Parisian" is no match
        Triple("Loop A", "P20", "Nowhere", "Q1", "Q2"),  # redirect cycle: stops, no article
    ]
    return single_split(facts, TEMPLATES, "trex", "test").questions


def test_positives_are_answer_bearing_passages_of_the_subject_article() -> None:
    result = find_positives(_questions(), PASSAGES, ARTICLES)
    got = dict(zip(result.questions.column("subject").to_pylist(), result.questions.column("positive_ids").to_pylist(),
                   strict=True))
    assert got == {"JFK": ["1"], "marie Curie": ["4", "5"], "Pierre Curie": ["6"], "Albert Einstein": [],
                   "Ulm": [], "Loop A": []}
    assert result.questions.num_rows == 6  # questions without a positive are kept


def test_report_counts_before_and_after_filtering_per_relation() -> None:
    batches = PASSAGES.to_batches(max_chunksize=2)  # streamed in small batches
    result = find_positives(_questions(), iter(batches), ARTICLES)
    assert sorted(result.report, key=lambda r: r["relation"]) == [
        {"dataset": "trex", "split": "test", "relation": "P19", "questions": 4, "with_article": 3, "with_positive": 3},
        {"dataset": "trex", "split": "test", "relation": "P20", "questions": 2, "with_article": 1, "with_positive": 0},
    ]


def test_title_normalization_and_redirects() -> None:
    assert normalize_title("  john_F.  kennedy ") == "John F. kennedy"  # only the first letter, like MediaWiki
    redirects = {"JFK": "Jack Kennedy", "Jack Kennedy": "John F. Kennedy", "A": "B", "B": "A"}
    assert resolve_title("jFK", redirects) == "John F. Kennedy"
    assert resolve_title("A", redirects) in {"A", "B"}
    assert resolve_title("Nothing", {}) == "Nothing"
