"""Training examples, multi-set mixing and batch collation.

The caller builds `TrainingExample`s from the `questions` and `passages` tables; this module
never reads storage. `MultiSetSampler` fixes the order of every epoch as a pure function of
(seed, epoch), so a run resumed at (epoch, position) sees exactly the examples it would have
seen without stopping.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ..storage.atomic import write_parquet_atomic
from .base import Inputs, Retriever
from .buckets import Buckets, bucketed

Passage = tuple[str, str]  # (title, text)


@dataclass(frozen=True)
class TrainingExample:
    """One question with its positive passage, BM25/mined hard negatives and domain labels."""

    question: str
    answers: tuple[str, ...]
    positive: Passage
    hard_negatives: tuple[Passage, ...] = ()
    domains: tuple[str, ...] = ()
    question_id: str | None = None
    positive_id: str | None = None
    hard_negative_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.question:
            raise ValueError(f"training example {self.question_id!r}: empty question")
        if len(self.positive) != 2:
            raise ValueError(f"training example {self.question_id!r}: positive must be (title, text)")
        if self.hard_negative_ids and len(self.hard_negative_ids) != len(self.hard_negatives):
            raise ValueError(
                f"training example {self.question_id!r}: {len(self.hard_negative_ids)} hard negative ids "
                f"for {len(self.hard_negatives)} hard negatives"
            )


def derived_seed(*parts: int | str) -> int:
    """A stable 63-bit seed from several parts (independent of Python's hash randomisation)."""
    text = "/".join(str(p) for p in parts).encode("utf-8")
    return (zlib.crc32(text) << 31 | zlib.crc32(text[::-1])) & 0x7FFF_FFFF_FFFF_FFFF


@dataclass
class MultiSetSampler:
    """Mixes several training sets; `weights[i]` multiplies how often set i is drawn per epoch.

    An epoch draws round(weight * size) examples from each set (weight < 1 subsamples, > 1
    repeats the set in fresh permutations), then shuffles everything together, as DPR's
    multi-set training with sampling rates.
    """

    datasets: Sequence[Sequence[TrainingExample]]
    weights: Sequence[float] | None = None
    seed: int = 0
    names: Sequence[str] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.datasets:
            raise ValueError("MultiSetSampler needs at least one dataset")
        self.weights = list(self.weights) if self.weights is not None else [1.0] * len(self.datasets)
        if len(self.weights) != len(self.datasets):
            raise ValueError(f"{len(self.weights)} weights for {len(self.datasets)} datasets")
        for index, (data, weight) in enumerate(zip(self.datasets, self.weights, strict=True)):
            label = self.names[index] if index < len(self.names) else f"dataset {index}"
            if weight <= 0:
                raise ValueError(f"{label}: sampling weight must be > 0, got {weight}")
            if len(data) == 0:
                raise ValueError(f"{label}: no training examples")
        self._counts = [max(1, round(w * len(d))) for d, w in zip(self.datasets, self.weights, strict=True)]

    @classmethod
    def single(cls, examples: Sequence[TrainingExample], seed: int = 0) -> MultiSetSampler:
        return cls([examples], [1.0], seed)

    @property
    def epoch_size(self) -> int:
        return sum(self._counts)

    def signature(self) -> dict:
        """What must match for a checkpoint to resume on this data."""
        return {"sizes": [len(d) for d in self.datasets], "weights": list(self.weights), "seed": self.seed}

    def epoch_order(self, epoch: int) -> list[tuple[int, int]]:
        """(dataset index, example index) pairs of one epoch, deterministic in (seed, epoch)."""
        pairs: list[tuple[int, int]] = []
        for index, (data, count) in enumerate(zip(self.datasets, self._counts, strict=True)):
            rng = np.random.default_rng(derived_seed(self.seed, epoch, index))
            chosen: list[int] = []
            while len(chosen) < count:
                chosen.extend(rng.permutation(len(data)).tolist())
            pairs.extend((index, i) for i in chosen[:count])
        rng = np.random.default_rng(derived_seed(self.seed, epoch, "mix"))
        return [pairs[i] for i in rng.permutation(len(pairs))]

    def example(self, pair: tuple[int, int]) -> TrainingExample:
        return self.datasets[pair[0]][pair[1]]


@dataclass
class Batch:
    """A tokenized micro-batch: passages are the B positives followed by the hard negatives.

    Either side is one padded block, or `Buckets` of length-sorted rows padded per bucket."""

    question_inputs: Inputs | Buckets
    passage_inputs: Inputs | Buckets
    positive_index: torch.Tensor
    domain_targets: torch.Tensor | None
    size: int
    passage_keys: torch.Tensor | None = None  # int64 identity of each passage (equal = same passage)

    def to(self, device: torch.device) -> Batch:
        return Batch(
            _to_device(self.question_inputs, device),
            _to_device(self.passage_inputs, device),
            self.positive_index.to(device),
            None if self.domain_targets is None else self.domain_targets.to(device),
            self.size,
            None if self.passage_keys is None else self.passage_keys.to(device),
        )


class StoredPassageTokens(Protocol):
    """Passages' token ids found by passage id (``models.training_tokens.TrainingPassageTokens``)."""

    def covers(self, ids: Sequence[str | None]) -> bool: ...

    def padded(self, ids: Sequence[str]) -> Inputs: ...

    def unpadded(self, ids: Sequence[str]) -> dict[str, list[list[int]]]: ...


def passage_key(passage: Passage) -> int:
    """A stable int64 identity of a passage's content (title and text): two copies of the same
    paragraph under different ids are still the same passage to the loss."""
    return derived_seed(*passage)


def _to_device(inputs: Inputs | Buckets, device: torch.device) -> Inputs | Buckets:
    if isinstance(inputs, Buckets):
        return inputs.to(device)
    return {k: v.to(device) for k, v in inputs.items()}


def collate(
    retriever: Retriever,
    examples: Sequence[TrainingExample],
    hard_negatives: int,
    seed: int,
    domains: Sequence[str] | None = None,
    bucket_tokens: int | None = None,
    bucket_questions: bool = False,
    stored: StoredPassageTokens | None = None,
) -> Batch:
    """Tokenize questions and passages; pick up to `hard_negatives` per question (seeded).

    With `bucket_tokens`, passages (and questions, with `bucket_questions`) come as length
    buckets of at most that many padded tokens (see `models.buckets`). With `stored` (the
    passages' token ids read once from the workspace, `models.training_tokens`) passages are
    gathered from it, not tokenized: the same tensors."""
    titles = [e.positive[0] for e in examples]
    texts = [e.positive[1] for e in examples]
    ids = [e.positive_id for e in examples]
    keys = [passage_key(e.positive) for e in examples]
    rng = np.random.default_rng(seed)
    for example in examples:
        pool = example.hard_negatives
        if hard_negatives > 0 and pool:
            take = rng.permutation(len(pool))[:hard_negatives]
            titles.extend(pool[i][0] for i in take)
            texts.extend(pool[i][1] for i in take)
            ids.extend(example.hard_negative_ids[i] if i < len(example.hard_negative_ids) else None for i in take)
            keys.extend(passage_key(pool[i]) for i in take)
    targets = None
    if domains is not None:
        column = {d: i for i, d in enumerate(domains)}
        targets = torch.zeros(len(examples), len(domains))
        for row, example in enumerate(examples):
            for domain in example.domains:
                if domain in column:
                    targets[row, column[domain]] = 1.0
    questions = [e.question for e in examples]
    tokenizer = retriever.tokenizer
    if bucket_tokens and bucket_questions:
        question_inputs: Inputs | Buckets = bucketed(
            retriever.question_token_rows(questions), tokenizer, bucket_tokens
        )
    else:
        question_inputs = retriever.tokenize_questions(questions)
    from_store = stored is not None and stored.covers(ids)
    if bucket_tokens:
        rows = stored.unpadded(ids) if from_store else retriever.passage_token_rows(titles, texts)  # type: ignore[union-attr, arg-type]
        passage_inputs: Inputs | Buckets = bucketed(rows, tokenizer, bucket_tokens)
    else:
        passage_inputs = stored.padded(ids) if from_store else retriever.tokenize_passages(titles, texts)  # type: ignore[union-attr, arg-type]
    return Batch(question_inputs, passage_inputs, torch.arange(len(examples)), targets, len(examples),
                 torch.tensor(keys, dtype=torch.int64))  # fmt: skip


EXAMPLE_SCHEMA = pa.schema(
    [
        ("question_id", pa.string()),
        ("question", pa.string()),
        ("answers", pa.list_(pa.string())),
        ("positive_id", pa.string()),
        ("positive_title", pa.string()),
        ("positive_text", pa.string()),
        ("hard_negative_ids", pa.list_(pa.string())),
        ("hard_negative_titles", pa.list_(pa.string())),
        ("hard_negative_texts", pa.list_(pa.string())),
        ("domains", pa.list_(pa.string())),
    ]
)


def examples_from_tables(
    questions: pa.Table, passages: pa.Table
) -> tuple[list[TrainingExample], Counter[str]]:
    """Join `questions` rows with the `passages` they reference into training examples.

    The first positive id found among the passages is the example's positive (DPR uses the
    first gold context). Questions without any known positive are skipped, counted apart as
    those with no positive id at all (`question_without_positive`: answer-only questions, which
    `odqa positives` gives positives) and those whose positive ids name no passage of the table
    (`question_without_known_positive`); hard-negative ids missing from the passages are dropped
    and counted (`unknown_hard_negative`).
    """
    lookup = {
        pid: (title or "", text or "")
        for pid, title, text in zip(
            passages.column("passage_id").to_pylist(),
            passages.column("title").to_pylist(),
            passages.column("text").to_pylist(),
            strict=True,
        )
    }
    skipped: Counter[str] = Counter()
    examples: list[TrainingExample] = []
    for row in questions.to_pylist():
        positive_id = next((p for p in row.get("positive_ids") or [] if p in lookup), None)
        if positive_id is None:
            skipped["question_without_known_positive" if row.get("positive_ids") else "question_without_positive"] += 1
            continue
        negative_ids = []
        for passage_id in row.get("hard_negative_ids") or []:
            if passage_id in lookup:
                negative_ids.append(passage_id)
            else:
                skipped["unknown_hard_negative"] += 1
        examples.append(
            TrainingExample(
                question=row["question"],
                answers=tuple(row.get("answers") or ()),
                positive=lookup[positive_id],
                hard_negatives=tuple(lookup[p] for p in negative_ids),
                domains=tuple(row.get("domains") or ()),
                question_id=row.get("question_id"),
                positive_id=positive_id,
                hard_negative_ids=tuple(negative_ids),
            )
        )
    return examples, skipped


def referenced_passage_ids(questions: pa.Table) -> set[str]:
    """Every positive and hard-negative passage id the questions mention."""
    ids: set[str] = set()
    for column in ("positive_ids", "hard_negative_ids"):
        for values in questions.column(column).to_pylist():
            ids.update(values or ())
    return ids


def write_examples(examples: Sequence[TrainingExample], path: Path) -> None:
    """Store examples as Parquet (written to a temporary name, then renamed)."""
    rows = [
        {
            "question_id": e.question_id,
            "question": e.question,
            "answers": list(e.answers),
            "positive_id": e.positive_id,
            "positive_title": e.positive[0],
            "positive_text": e.positive[1],
            "hard_negative_ids": list(e.hard_negative_ids),
            "hard_negative_titles": [t for t, _ in e.hard_negatives],
            "hard_negative_texts": [x for _, x in e.hard_negatives],
            "domains": list(e.domains),
        }
        for e in examples
    ]
    write_parquet_atomic(pa.Table.from_pylist(rows, schema=EXAMPLE_SCHEMA), path)


def read_examples(path: Path) -> list[TrainingExample]:
    table = pq.read_table(path)
    missing = set(EXAMPLE_SCHEMA.names) - set(table.column_names)
    if missing:
        raise ValueError(f"{path}: not a training-examples file (missing columns {sorted(missing)})")
    return [
        TrainingExample(
            question=row["question"],
            answers=tuple(row["answers"] or ()),
            positive=(row["positive_title"], row["positive_text"]),
            hard_negatives=tuple(
                zip(row["hard_negative_titles"] or (), row["hard_negative_texts"] or (), strict=True)
            ),
            domains=tuple(row["domains"] or ()),
            question_id=row["question_id"],
            positive_id=row["positive_id"],
            hard_negative_ids=tuple(row["hard_negative_ids"] or ()),
        )
        for row in table.to_pylist()
    ]
