"""The thesis' T-REx QA splits: sizes, determinism, disjointness, analysis sets."""

from __future__ import annotations

from collections import Counter

import pytest

from odqa.pipelines.questions.splits import (
    ANALYSIS_SPLITS,
    THESIS_SEEN_RELATIONS,
    THESIS_UNSEEN_RELATIONS,
    SplitConfig,
    analysis_split,
    single_split,
    thesis_splits,
)
from odqa.pipelines.questions.triples import Triple

TEMPLATES = {r: f"Question about [X] for {r}?" for r in THESIS_SEEN_RELATIONS + THESIS_UNSEEN_RELATIONS + ("P50",)}
TABLE_3_1 = {"P19": 10_000, "P159": 10_000, "P176": 10_000, "P264": 10_000, "P407": 6_722, "P413": 10_000,
             "P740": 9_415, "P17": 10_000, "P20": 10_000, "P30": 10_000, "P127": 10_000, "P136": 10_000,
             "P276": 10_000, "P495": 10_000}


def _facts(sizes: dict[str, int], subjects: int | None = None) -> list[Triple]:
    """`sizes[r]` distinct facts per relation; with `subjects`, subjects are shared across relations."""
    facts = []
    for r, n in sizes.items():
        for i in range(n):
            s = i % subjects if subjects else i
            facts.append(Triple(f"Entity {s}", r, f"Object {r} {i}", f"Q{s + 1}", f"Q{10_000_000 + i}", (f"Alias {i}",)))
    return facts


def _split_counts(result, splits: tuple[str, ...]) -> dict[str, int]:
    counts = Counter(result.questions.column("split").to_pylist())
    return {s: counts[s] for s in splits}


def test_table_3_1_sizes_give_the_thesis_split_sizes() -> None:
    result = thesis_splits(_facts(TABLE_3_1), TEMPLATES, "trex")
    assert _split_counts(result, ("train", "dev", "test", "test_unseen")) == {
        "train": 52_909, "dev": 6_613, "test": 6_615, "test_unseen": 7_000,  # Table 6.3
    }
    per_relation = {(row["split"], row["relation"]): row["questions"] for row in result.counts()}
    assert per_relation[("train", "P407")] == 5_377 and per_relation[("test", "P740")] == 942
    assert all(per_relation[("test_unseen", r)] == 1_000 for r in THESIS_UNSEEN_RELATIONS)


def test_splits_are_deterministic_disjoint_and_keep_unseen_relations_out_of_training() -> None:
    facts = _facts({r: 400 for r in THESIS_SEEN_RELATIONS + THESIS_UNSEEN_RELATIONS}, subjects=150)
    config = SplitConfig(size_per_relation=200, analysis_per_relation=30, seed=3)
    first = thesis_splits(facts, TEMPLATES, "trex", config)
    assert first.questions.equals(thesis_splits(list(reversed(facts)), TEMPLATES, "trex", config).questions)
    other_seed = thesis_splits(facts, TEMPLATES, "trex", SplitConfig(size_per_relation=200, analysis_per_relation=30, seed=4))
    assert first.questions.column("question_id").to_pylist() != other_seed.questions.column("question_id").to_pylist()

    ids = first.questions.column("question_id").to_pylist()
    assert len(ids) == len(set(ids))  # every fact in at most one split
    rows = first.questions.to_pylist()
    for row in rows:
        if row["split"] in ("train", "dev"):
            assert row["relation"] in THESIS_SEEN_RELATIONS
        if row["split"] == "test_unseen":
            assert row["relation"] in THESIS_UNSEEN_RELATIONS
    assert _split_counts(first, ("train", "dev", "test", "test_unseen")) == {
        "train": 7 * 160, "dev": 7 * 20, "test": 7 * 20, "test_unseen": 7 * 20,
    }


def test_analysis_sets_follow_the_seen_entity_definition() -> None:
    facts = _facts({r: 400 for r in THESIS_SEEN_RELATIONS + THESIS_UNSEEN_RELATIONS}, subjects=150)
    config = SplitConfig(size_per_relation=200, analysis_per_relation=30, seed=3)
    result = thesis_splits(facts, TEMPLATES, "trex", config)
    rows = result.questions.to_pylist()
    train_subjects = {row["subject_id"] for row in rows if row["split"] == "train"}
    used_outside_analysis = {row["question_id"] for row in rows if not row["split"].startswith("analysis_")}
    for split in ANALYSIS_SPLITS:
        members = [row for row in rows if row["split"] == split]
        entity_seen = split.startswith("analysis_seen_entities")
        relation_seen = split.endswith("_seen_relations")
        wanted = THESIS_SEEN_RELATIONS if relation_seen else THESIS_UNSEEN_RELATIONS
        assert {row["relation"] for row in members} <= set(wanted)
        assert all((row["subject_id"] in train_subjects) == entity_seen for row in members)
        assert not {row["question_id"] for row in members} & used_outside_analysis
        got = Counter(row["relation"] for row in members)
        shortfalls = {s["relation"]: s["got"] for s in result.shortfalls if s["split"] == split}
        for relation in wanted:
            assert got[relation] == shortfalls.get(relation, 30)
    # An unseen relation's pool is everything outside test_unseen (380 facts each here).
    for relation in THESIS_UNSEEN_RELATIONS:
        held_out = {row["question_id"] for row in rows if row["split"] == "test_unseen" and row["relation"] == relation}
        pool = [row for row in single_split([f for f in facts if f.relation == relation], TEMPLATES, "trex", "x")
                .questions.to_pylist() if row["question_id"] not in held_out]
        assert len(pool) == 380
        for entity_seen in (True, False):
            available = sum((row["subject_id"] in train_subjects) == entity_seen for row in pool)
            got = sum(row["relation"] == relation for row in rows if row["split"] == analysis_split(entity_seen, False))
            assert got == min(30, available)


def test_seen_relations_without_leftover_facts_report_a_shortfall() -> None:
    result = thesis_splits(_facts({"P19": 50, "P17": 50}), TEMPLATES, "trex", SplitConfig(size_per_relation=50))
    assert {(s["split"], s["relation"], s["got"]) for s in result.shortfalls if s["relation"] == "P19"} == {
        (analysis_split(True, True), "P19", 0), (analysis_split(False, True), "P19", 0),
    }


def test_answers_are_object_then_aliases_without_repeats() -> None:
    fact = Triple("Ada Lovelace", "P19", "London", "Q7259", "Q84", ("London, UK", "London", "Londinium", "London, UK"))
    result = single_split([fact, fact], {"P19": "Where was [X] born?"}, "eq", "test")
    assert result.questions.to_pylist() == [
        {
            "question_id": result.questions.column("question_id")[0].as_py(),
            "dataset": "eq",
            "split": "test",
            "question": "Where was Ada Lovelace born?",
            "answers": ["London", "London, UK", "Londinium"],
            "relation": "P19",
            "subject": "Ada Lovelace",
            "subject_id": "Q7259",
            "positive_ids": [],
            "hard_negative_ids": [],
            "domains": [],
            "positives_from": None,
        }
    ]


def test_single_split_keeps_every_fact_and_ids_are_stable() -> None:
    facts = _facts({"P19": 30, "P50": 20})
    result = single_split(facts, TEMPLATES, "mine", "all")
    assert set(result.questions.column("split").to_pylist()) == {"all"}
    assert result.questions.num_rows == 50
    again = single_split(facts, TEMPLATES, "mine", "other")
    assert again.questions.column("question_id").equals(result.questions.column("question_id"))
    assert single_split(facts, TEMPLATES, "theirs", "all").questions.column("question_id")[0] != (
        result.questions.column("question_id")[0]
    )


def test_missing_template_and_foreign_relations() -> None:
    with pytest.raises(KeyError, match=r"no question template for relation\(s\) \['P19'\]"):
        single_split(_facts({"P19": 2}), {"P20": "Where did [X] die?"}, "d", "all")
    result = thesis_splits(_facts({"P19": 10, "P50": 4}), TEMPLATES, "trex")
    assert result.skipped == Counter({"relation P50 is neither seen nor unseen": 4})
    with pytest.raises(ValueError, match="both seen and unseen"):
        SplitConfig(seen_relations=("P19",), unseen_relations=("P19",))
