"""Hybrid dense + BM25 retrieval as in TASER (section 4.3 / appendix D, eq. 7).

TASER retrieves K' = 100 candidates separately from the dense retriever and from BM25, scores
every candidate of the union with ``sim(q, p) + alpha * BM25(q, p)``, and keeps the top K. It
says it uses "the same normalization techniques described in (Ma et al., 2021)", i.e. those of
pyserini's ``HybridSearcher`` (Ma et al.'s code), which this module reproduces:

* a candidate missing from one list gets that list's minimum score for this question (it was
  not retrieved, so it scores no better than the worst retrieved one);
* each list's scores are then min-max normalised around the middle of the range,
  ``(s - (min + max) / 2) / (max - min)``, so both lie in [-0.5, 0.5] and one alpha fits every
  question (a range of zero maps to 0 instead of dividing by zero).

With alpha = 0 the order is the dense order: the fused score is then an increasing function of
the dense score, and ties (a BM25-only candidate gets the dense minimum) are broken by dense rank
first, then BM25 rank. One alpha is tuned on a dev set over 0.5..2.0 in steps of 0.1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..evaluation.answers import AnswerMatcher, MatchMode

DEFAULT_DEPTH = 100
DEFAULT_ALPHAS: tuple[float, ...] = tuple(round(0.5 + 0.1 * i, 1) for i in range(16))  # 0.5 .. 2.0
_MISSING_RANK = np.iinfo(np.int32).max


def _check_run(table: pa.Table, name: str) -> None:
    missing = {"question_id", "passage_id", "score"} - set(table.column_names)
    if missing:
        raise ValueError(f"{name} run lacks column(s) {sorted(missing)}; expected question_id, passage_id, score")


def _group_starts(sorted_codes: np.ndarray, num_groups: int) -> np.ndarray:
    """Index of the first row of each group code in a code-sorted array (len num_groups)."""
    return np.searchsorted(sorted_codes, np.arange(num_groups))


def _top_per_question(codes: np.ndarray, scores: np.ndarray, depth: int, num_questions: int):
    """Rows of each question's ``depth`` best scores, with their 1-based ranks."""
    order = np.lexsort((np.arange(len(scores)), -scores, codes))
    sorted_codes = codes[order]
    position = np.arange(len(order)) - _group_starts(sorted_codes, num_questions)[sorted_codes]
    keep = position < depth
    return order[keep], (position[keep] + 1).astype(np.int32)


def _normalize(scores: np.ndarray, codes: np.ndarray, present: np.ndarray, num_questions: int):
    """Fill missing scores with the question's minimum, then centre-and-scale by its range."""
    lo = np.full(num_questions, np.inf)
    hi = np.full(num_questions, -np.inf)
    np.minimum.at(lo, codes[present], scores[present])
    np.maximum.at(hi, codes[present], scores[present])
    has_list = np.isfinite(lo)
    lo, hi = np.where(has_list, lo, 0.0), np.where(has_list, hi, 1.0)  # pyserini's empty-list defaults
    filled = np.where(present, scores, lo[codes])
    span = (hi - lo)[codes]
    centred = filled - ((lo + hi) / 2)[codes]
    return np.divide(centred, span, out=np.zeros_like(centred), where=span > 0)


def fusion_candidates(dense: pa.Table, sparse: pa.Table, depth: int = DEFAULT_DEPTH) -> pa.Table:
    """The union of each question's top-``depth`` dense and BM25 candidates, normalised.

    Inputs are runs with columns question_id, passage_id, score (other columns are ignored).
    Returns question_id, passage_id, dense_score, sparse_score (normalised, missing ones filled
    as described in the module docstring), dense_rank, sparse_rank (1-based, null if absent).
    """
    _check_run(dense, "dense")
    _check_run(sparse, "sparse")
    question_ids = pa.chunked_array(dense.column("question_id").chunks + sparse.column("question_id").chunks)
    unique, codes = np.unique(question_ids.to_numpy(), return_inverse=True)
    nq = len(unique)
    parts = []
    for name, table, code in (("dense", dense, codes[:dense.num_rows]), ("sparse", sparse, codes[dense.num_rows:])):
        scores = table.column("score").to_numpy().astype(np.float64)
        rows, ranks = _top_per_question(code, scores, depth, nq)
        parts.append(pa.table({
            "q": pa.array(code[rows], pa.int64()),
            "passage_id": table.column("passage_id").take(pa.array(rows)),
            f"{name}_raw": pa.array(scores[rows]),
            f"{name}_rank": pa.array(ranks),
        }))
    union = parts[0].join(parts[1], keys=["q", "passage_id"], join_type="full outer").combine_chunks()
    q = union.column("q").to_numpy()
    order = np.lexsort((union.column("passage_id").to_numpy(zero_copy_only=False), q))
    union = union.take(pa.array(order))
    q = q[order]
    columns = {"question_id": pa.array(unique[q]), "passage_id": union.column("passage_id")}
    for name in ("dense", "sparse"):
        raw = union.column(f"{name}_raw")
        present = raw.is_valid().to_numpy(zero_copy_only=False)
        values = raw.fill_null(0.0).to_numpy()
        columns[f"{name}_score"] = pa.array(_normalize(values, q, present, nq))
    for name in ("dense", "sparse"):
        columns[f"{name}_rank"] = union.column(f"{name}_rank")
    return pa.table(columns)


@dataclass(frozen=True)
class _Prepared:
    codes: np.ndarray
    question_ids: np.ndarray
    dense: np.ndarray
    sparse: np.ndarray
    dense_rank: np.ndarray
    sparse_rank: np.ndarray


def _prepare(candidates: pa.Table) -> _Prepared:
    unique, codes = np.unique(candidates.column("question_id").to_numpy(zero_copy_only=False), return_inverse=True)
    ranks = [pc.fill_null(candidates.column(c), _MISSING_RANK).to_numpy() for c in ("dense_rank", "sparse_rank")]
    return _Prepared(codes, unique, candidates.column("dense_score").to_numpy(),
                     candidates.column("sparse_score").to_numpy(), ranks[0], ranks[1])


def _ranked(prep: _Prepared, alpha: float, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row order, 1-based ranks and scores of each question's top k fused candidates."""
    scores = prep.dense + alpha * prep.sparse
    order = np.lexsort((prep.sparse_rank, prep.dense_rank, -scores, prep.codes))
    sorted_codes = prep.codes[order]
    position = np.arange(len(order)) - _group_starts(sorted_codes, len(prep.question_ids))[sorted_codes]
    keep = position < k
    return order[keep], position[keep] + 1, scores[order[keep]]


def fuse(candidates: pa.Table, alpha: float, k: int = DEFAULT_DEPTH) -> pa.Table:
    """Top ``k`` per question by ``dense + alpha * sparse``: question_id, passage_id, rank, score."""
    prep = _prepare(candidates)
    rows, ranks, scores = _ranked(prep, alpha, k)
    return pa.table({
        "question_id": pa.array(prep.question_ids[prep.codes[rows]], pa.string()),
        "passage_id": candidates.column("passage_id").take(pa.array(rows)),
        "rank": pa.array(ranks, pa.int32()),
        "score": pa.array(scores, pa.float32()),
    })


def hybrid_run(dense: pa.Table, sparse: pa.Table, alpha: float, k: int = DEFAULT_DEPTH,
               depth: int = DEFAULT_DEPTH) -> pa.Table:
    """TASER's hybrid run: fuse the top-``depth`` dense and BM25 candidates, keep the top ``k``."""
    return fuse(fusion_candidates(dense, sparse, depth), alpha, k)


def candidate_hits(candidates: pa.Table, answers: Mapping[str, Sequence[str]], passage_texts: Mapping[str, str],
                   mode: MatchMode = "string") -> np.ndarray:
    """For each candidate row: does the passage contain one of its question's answers (DPR rules)."""
    matcher = AnswerMatcher(passage_texts, mode)
    qids = candidates.column("question_id").to_pylist()
    pids = candidates.column("passage_id").to_pylist()
    empty: Sequence[str] = ()
    return np.fromiter((matcher.has_answer(p, answers.get(q, empty)) for q, p in zip(qids, pids, strict=True)),
                       dtype=bool, count=len(qids))


@dataclass(frozen=True)
class AlphaSearch:
    best_alpha: float
    k: int
    recall: dict[float, float]  # R@k on the dev questions for every alpha tried
    dense_only: float  # R@k of the dense ranking alone (alpha 0), for reference


def recall_at_k(candidates: pa.Table, hits: np.ndarray, alpha: float, k: int, num_questions: int) -> float:
    """Share of ``num_questions`` with an answer-bearing passage in the fused top k."""
    prep = _prepare(candidates)
    rows, _, _ = _ranked(prep, alpha, k)
    found = np.zeros(len(prep.question_ids), dtype=bool)
    found[prep.codes[rows[hits[rows]]]] = True
    return float(found.sum() / num_questions) if num_questions else 0.0


def tune_alpha(candidates: pa.Table, hits: np.ndarray, num_questions: int, *,
               alphas: Sequence[float] = DEFAULT_ALPHAS, k: int = 20) -> AlphaSearch:  # fmt: skip
    """The alpha with the best dev R@k (TASER: one alpha from 0.5..2.0 for all datasets).

    ``hits`` says per candidate row whether it holds an answer (`candidate_hits`, computed per
    dev set with that set's matching rules). Every one of ``num_questions`` counts, including
    questions without any candidate (a miss for all alphas). Ties go to the smallest alpha, so the
    choice does not depend on float noise in the grid.
    """
    if not alphas:
        raise ValueError("alphas must not be empty")
    recall = {float(a): recall_at_k(candidates, hits, float(a), k, num_questions) for a in alphas}
    best = max(recall.values())
    return AlphaSearch(best_alpha=min(a for a, r in recall.items() if r == best), k=k, recall=recall,
                       dense_only=recall_at_k(candidates, hits, 0.0, k, num_questions))
