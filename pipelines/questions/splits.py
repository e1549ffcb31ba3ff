"""T-REx QA template questions and the thesis' splits (sections 3.2 and 3.3, Tables 3.1, 6.3).

Per relation, facts are put in a seeded order (MD5 of "seed|split|relation|subject|object",
independent of file order) and the first `size_per_relation` (thesis: 10,000, Table 3.1) form the relation's
dataset. Then:

- seen relations: 80/10/10 train/dev/test, per relation, with floor() for train and dev and the
  rest to test. With Table 3.1's sizes this gives exactly the thesis' 52,909 / 6,613 / 6,615
  (Table 6.3).
- unseen relations: only a test set (`test_unseen`) of floor(10%) of each relation (7 x 1,000 =
  7,000 in the thesis); the other 90% are never trained on.
- entity-vs-relation analysis sets (section 3.3): an entity is *seen* when it is the subject of
  at least one `train` question (entities are compared by Wikidata id, by label when a source
  has no ids). For each of the four (entity seen?, relation seen?) combinations, up to
  `analysis_per_relation` (300) questions per relation are drawn, in seeded order, from facts
  that are in no other split: for a seen relation the facts beyond its first
  `size_per_relation`, for an unseen relation everything outside `test_unseen`. A shortfall (the
  thesis' footnote: "two relations did not have enough overlapping entities") is reported, not
  filled.

Every fact lands in at most one split, so all splits are disjoint. `--splits none` instead keeps
every fact, in a single split of the caller's name.

A question is the relation's template with [X] = subject label; its answers are the object label
followed by the object's aliases (duplicates dropped, order kept). `question_id` hashes dataset,
relation, subject and object, so it is stable across runs and independent of the split.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import pyarrow as pa

from .rows import QUESTION_SCHEMA, stable_id, unique_in_order
from .templates import make_question
from .triples import Triple, check_relation_id

THESIS_SEEN_RELATIONS = ("P19", "P159", "P176", "P264", "P407", "P413", "P740")
THESIS_UNSEEN_RELATIONS = ("P17", "P20", "P30", "P127", "P136", "P276", "P495")

TRAIN, DEV, TEST, TEST_UNSEEN = "train", "dev", "test", "test_unseen"


def analysis_split(seen_entities: bool, seen_relations: bool) -> str:
    """Name of an entity-vs-relation analysis set, e.g. analysis_seen_entities_unseen_relations."""
    ent = "seen" if seen_entities else "unseen"
    rel = "seen" if seen_relations else "unseen"
    return f"analysis_{ent}_entities_{rel}_relations"


ANALYSIS_SPLITS = tuple(analysis_split(e, r) for e in (True, False) for r in (True, False))


@dataclass(frozen=True)
class SplitConfig:
    """How facts become the thesis' splits; the defaults are the thesis' values."""

    seen_relations: tuple[str, ...] = THESIS_SEEN_RELATIONS
    unseen_relations: tuple[str, ...] = THESIS_UNSEEN_RELATIONS
    size_per_relation: int | None = 10_000
    train_fraction: Fraction = Fraction(8, 10)
    dev_fraction: Fraction = Fraction(1, 10)
    unseen_test_fraction: Fraction = Fraction(1, 10)
    analysis_per_relation: int = 300
    seed: int = 0

    def __post_init__(self) -> None:
        for relation in (*self.seen_relations, *self.unseen_relations):
            check_relation_id(relation)
        overlap = set(self.seen_relations) & set(self.unseen_relations)
        if overlap:
            raise ValueError(f"relations cannot be both seen and unseen: {sorted(overlap)}")
        if min(self.train_fraction, self.dev_fraction) < 0 or self.train_fraction + self.dev_fraction > 1:
            raise ValueError("train and dev fractions must be >= 0 and sum to at most 1")
        if not 0 <= self.unseen_test_fraction <= 1:
            raise ValueError("unseen_test_fraction must be within [0, 1]")
        if self.analysis_per_relation < 0 or (self.size_per_relation is not None and self.size_per_relation < 0):
            raise ValueError("analysis_per_relation and size_per_relation must be >= 0")


@dataclass
class SplitResult:
    """The question rows, and what the report needs: counts and analysis-set shortfalls."""

    questions: pa.Table
    skipped: Counter[str]
    shortfalls: list[dict[str, object]]

    def counts(self) -> list[dict[str, object]]:
        """Questions per (split, relation), in first-seen order: the Table 3.1 / 6.3 figures."""
        pairs = Counter(zip(self.questions.column("split").to_pylist(), self.questions.column("relation").to_pylist(), strict=True))
        return [{"split": s, "relation": r, "questions": n} for (s, r), n in pairs.items()]


def question_id(dataset: str, triple: Triple) -> str:
    return stable_id(dataset, triple.relation, triple.subject_key, triple.object_key)


def questions_table(dataset: str, assigned: Sequence[tuple[str, Triple]], templates: Mapping[str, str]) -> pa.Table:
    """`questions` rows for (split, fact) pairs, built column by column (136K rows in the thesis)."""
    empty: list[list[str]] = [[] for _ in assigned]
    columns = {
        "question_id": [question_id(dataset, t) for _, t in assigned],
        "dataset": [dataset] * len(assigned),
        "split": [split for split, _ in assigned],
        "question": [make_question(templates[t.relation], t.subject) for _, t in assigned],
        "answers": [unique_in_order([t.object, *t.object_aliases]) for _, t in assigned],
        "relation": [t.relation for _, t in assigned],
        "subject": [t.subject for _, t in assigned],
        "subject_id": [t.subject_id for _, t in assigned],
        "positive_ids": empty,
        "hard_negative_ids": empty,
        "domains": empty,
        "positives_from": [None] * len(assigned),
    }
    return pa.table(columns, schema=QUESTION_SCHEMA)


def _split_order(triples: Sequence[Triple], seed: int) -> list[Triple]:
    # The relation is part of the key so that a pair present under two relations (born and died
    # in the same city) is placed independently in each: otherwise splits correlate across relations.
    def key(t: Triple) -> tuple[str, str, str]:
        digest = hashlib.md5(f"{seed}|split|{t.relation}|{t.subject_key}|{t.object_key}".encode()).hexdigest()
        return digest, t.subject_key, t.object_key

    return sorted(_distinct(triples), key=key)


def _distinct(triples: Sequence[Triple]) -> list[Triple]:
    """Triples without repeated (subject, object) facts; the first occurrence is kept."""
    first: dict[tuple[str, str], Triple] = {}
    for triple in triples:
        first.setdefault((triple.subject_key, triple.object_key), triple)
    return list(first.values())


def _floor(n: int, fraction: Fraction) -> int:
    return int(n * fraction)  # Fraction arithmetic: exact, no 0.8 * 10000 = 8000.000001 surprises


def _templates_for(relations: Sequence[str], templates: Mapping[str, str]) -> None:
    missing = [r for r in relations if r not in templates]
    if missing:
        raise KeyError(f"no question template for relation(s) {missing}; the templates file has {sorted(templates)}")


def _by_relation(triples: Sequence[Triple]) -> dict[str, list[Triple]]:
    grouped: dict[str, list[Triple]] = {}
    for triple in triples:
        grouped.setdefault(triple.relation, []).append(triple)
    return grouped


def thesis_splits(
    triples: Sequence[Triple], templates: Mapping[str, str], dataset: str, config: SplitConfig = SplitConfig()
) -> SplitResult:
    """Template questions in train/dev/test/test_unseen and the four analysis sets."""
    grouped = _by_relation(triples)
    seen = [r for r in config.seen_relations if r in grouped]
    unseen = [r for r in config.unseen_relations if r in grouped]
    _templates_for(seen + unseen, templates)
    skipped: Counter[str] = Counter()
    for relation, facts in grouped.items():
        if relation not in config.seen_relations and relation not in config.unseen_relations:
            skipped[f"relation {relation} is neither seen nor unseen"] += len(facts)

    assigned: list[tuple[str, Triple]] = []
    pools: dict[str, list[Triple]] = {}
    for relation in seen:
        ordered = _split_order(grouped[relation], config.seed)
        size = len(ordered) if config.size_per_relation is None else min(len(ordered), config.size_per_relation)
        n_train, n_dev = _floor(size, config.train_fraction), _floor(size, config.dev_fraction)
        assigned += [(TRAIN, t) for t in ordered[:n_train]]
        assigned += [(DEV, t) for t in ordered[n_train : n_train + n_dev]]
        assigned += [(TEST, t) for t in ordered[n_train + n_dev : size]]
        pools[relation] = ordered[size:]
    for relation in unseen:
        ordered = _split_order(grouped[relation], config.seed)
        size = len(ordered) if config.size_per_relation is None else min(len(ordered), config.size_per_relation)
        n_test = _floor(size, config.unseen_test_fraction)
        assigned += [(TEST_UNSEEN, t) for t in ordered[:n_test]]
        pools[relation] = ordered[n_test:]

    seen_entities = {t.subject_key for split, t in assigned if split == TRAIN}
    shortfalls: list[dict[str, object]] = []
    for relation in seen + unseen:
        relation_seen = relation in config.seen_relations
        for entity_seen in (True, False):
            matching = [t for t in pools[relation] if (t.subject_key in seen_entities) == entity_seen]
            chosen = matching[: config.analysis_per_relation]
            split = analysis_split(entity_seen, relation_seen)
            assigned += [(split, t) for t in chosen]
            if len(chosen) < config.analysis_per_relation:
                shortfalls.append(
                    {"split": split, "relation": relation, "wanted": config.analysis_per_relation, "got": len(chosen)}
                )

    return SplitResult(questions_table(dataset, assigned, templates), skipped, shortfalls)


def single_split(
    triples: Sequence[Triple], templates: Mapping[str, str], dataset: str, split: str
) -> SplitResult:
    """`--splits none`: every distinct fact becomes a question in the one named split."""
    grouped = _by_relation(triples)
    _templates_for(list(grouped), templates)
    assigned = [(split, t) for facts in grouped.values() for t in _distinct(facts)]
    return SplitResult(questions_table(dataset, assigned, templates), Counter(), [])
