"""Relevance-judgment metrics of one question, as trec_eval defines them: ``MAP@K`` (map_cut),
``MRR@K`` (recip_rank on the run cut at K), ``Recall@K``, ``nDCG@K`` (ndcg_cut, the judgment as
gain) and ``P@K``. A passage is relevant when judged 1 or more.

Why not ranx, which odqa used before: ranx gives the same figures (tests/conformance pins ours
to trec_eval per question and to ranx on graded judgments, duplicates and unretrieved
questions), but each new process compiled its numba containers for ~12 CPU-seconds before the
first figure, so every `odqa evaluate` paid that on a 146-passage sample. These loops take
milliseconds per thousand questions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

_METRIC_NAME = re.compile(r"^(MAP|MRR|Recall|nDCG|P)@([1-9][0-9]*)$")


@lru_cache(maxsize=64)  # asked once per question and metric
def parse_qrels_metric(name: str) -> tuple[str, int]:
    """``nDCG@10`` -> ("nDCG", 10); an unknown name is an error naming the known ones."""
    match = _METRIC_NAME.match(name)
    if not match:
        raise ValueError(f"unknown qrels metric {name!r}; use MAP@K, MRR@K, Recall@K, nDCG@K or P@K")
    return match.group(1), int(match.group(2))


def question_scores(ranked: Sequence[str], judged: Mapping[str, int], metrics: Sequence[str]) -> dict[str, float]:
    """Each metric's value for one question: ``ranked`` its passage ids in rank order (rank 1
    first), ``judged`` its judgments (passage id -> relevance). A passage listed twice counts
    once, at its last rank (as a run of scores, trec_eval's and ranx's input, keeps it)."""
    last_rank = {str(pid): rank for rank, pid in enumerate(ranked, start=1)}
    ranking = sorted(last_rank, key=last_rank.__getitem__)
    gains = np.array([max(judged.get(pid, 0), 0) for pid in ranking], dtype=float)
    relevant = gains >= 1
    ideal = np.sort(np.array([rel for rel in judged.values() if rel >= 1], dtype=float))[::-1]
    num_relevant = len(ideal)
    values: dict[str, float] = {}
    for name in metrics:
        kind, k = parse_qrels_metric(name)
        hits = np.flatnonzero(relevant[:k]) + 1  # the ranks of the relevant passages in the top k
        if kind == "P":
            values[name] = len(hits) / k
        elif kind == "MRR":
            values[name] = 1.0 / hits[0] if len(hits) else 0.0
        elif not num_relevant:
            values[name] = 0.0  # Recall, MAP and nDCG of a question without a relevant passage
        elif kind == "Recall":
            values[name] = len(hits) / num_relevant
        elif kind == "MAP":
            values[name] = float(np.sum(np.arange(1, len(hits) + 1) / hits)) / num_relevant
        else:
            discounts = 1.0 / np.log2(np.arange(2, k + 2))
            top = gains[:k] * relevant[:k]
            values[name] = float(top @ discounts[: len(top)]) / float(ideal[:k] @ discounts[: len(ideal[:k])])
    return values
