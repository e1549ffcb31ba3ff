"""Dev-set R@K during training, over a small in-memory index of the dev passages.

The index holds every positive and hard negative of the dev examples (deduplicated), so it
needs no FAISS index or corpus encoding and runs in seconds between training steps. A passage
counts as a hit for a question when it is one of its positives or contains one of its answers
(the R@K of TASER/DPR checks answer strings; positives cover answer-less datasets).
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Callable, Sequence

import numpy as np

from ..pipelines.progress import log as progress_log
from .base import Retriever
from .data import TrainingExample

DevEvaluator = Callable[[Retriever], dict[str, float]]


def normalize_answer_text(text: str) -> str:
    text = unicodedata.normalize("NFD", text).lower()
    text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    return " ".join(re.findall(r"\w+", text))


def dev_pool(examples: Sequence[TrainingExample]) -> dict[tuple[str, str], int]:
    """The passages dev R@K ranks, (title, text) -> position: every positive and hard negative of
    the dev examples, deduplicated in order. Train reports name its size, since R@K over this pool
    is higher than over the whole corpus."""
    keys: dict[tuple[str, str], int] = {}
    for example in examples:
        keys.setdefault(tuple(example.positive), len(keys))
        for negative in example.hard_negatives:
            keys.setdefault(tuple(negative), len(keys))
    return keys


class InMemoryDevEvaluator:
    """Callable computing R@K for `examples` with any retriever."""

    def __init__(
        self, examples: Sequence[TrainingExample], ks: Sequence[int] = (1, 5, 20, 100), batch_size: int = 64
    ):
        if not examples:
            raise ValueError("dev evaluation needs at least one example")
        self.examples = list(examples)
        self.ks = tuple(sorted(ks))
        self.batch_size = batch_size
        keys = dev_pool(self.examples)
        self.positives: list[set[int]] = [{keys[tuple(example.positive)]} for example in self.examples]
        self.passages = list(keys)
        normalized = [f" {normalize_answer_text(title + ' ' + text)} " for title, text in self.passages]
        self.hits: list[set[int]] = []
        for example, positives in zip(self.examples, self.positives, strict=True):
            answers = [f" {normalize_answer_text(a)} " for a in example.answers if normalize_answer_text(a)]
            answer_hits = {i for i, text in enumerate(normalized) if any(a in text for a in answers)}
            self.hits.append(positives | answer_hits)

    def __call__(self, retriever: Retriever) -> dict[str, float]:
        # Logged at the start and the end (the encodings log their own progress when they last
        # long enough), so a run's log is not silent for the whole evaluation.
        started = time.perf_counter()
        progress_log.info("dev evaluation: encoding %d questions and a pool of %d passages (their positives and "
                          "hard negatives)", len(self.examples), len(self.passages))  # fmt: skip
        questions = retriever.encode_questions(
            [e.question for e in self.examples], batch_size=self.batch_size
        )
        passages = retriever.encode_passages(
            [t for t, _ in self.passages], [x for _, x in self.passages], batch_size=self.batch_size
        )
        scores = questions @ passages.T
        ranking = np.argsort(-scores, axis=1, kind="stable")
        metrics = {}
        for k in self.ks:
            top = ranking[:, :k]
            found = [bool(hits.intersection(row.tolist())) for hits, row in zip(self.hits, top, strict=True)]
            metrics[f"R@{k}"] = float(np.mean(found))
        progress_log.info("dev evaluation done in %.1f s: %s", time.perf_counter() - started,
                          ", ".join(f"{key} {value:.4f}" for key, value in metrics.items()))  # fmt: skip
        return metrics
