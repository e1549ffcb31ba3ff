"""Hybrid dense + BM25 fusion (TASER eq. 7 with Ma et al.'s normalisation) and alpha tuning."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from odqa.pipelines.dense.hybrid import (
    DEFAULT_ALPHAS,
    candidate_hits,
    fuse,
    fusion_candidates,
    hybrid_run,
    recall_at_k,
    tune_alpha,
)


def run(rows: list[tuple[str, str, float]]) -> pa.Table:
    q, p, s = zip(*rows, strict=True) if rows else ((), (), ())
    return pa.table({"question_id": pa.array(q, pa.string()), "passage_id": pa.array(p, pa.string()),
                     "score": pa.array(s, pa.float32())})


def random_runs(seed: int, nq: int = 30, depth: int = 100, pool: int = 400):
    rng = np.random.default_rng(seed)
    dense, sparse = [], []
    for q in range(nq):
        for target, scale in ((dense, 1.0), (sparse, 20.0)):
            for p in rng.choice(pool, size=depth, replace=False):
                target.append((f"q{q}", f"p{p}", float(rng.normal() * scale + (scale if scale > 1 else 0))))
    return run(dense), run(sparse)


def test_normalisation_and_missing_scores_hand_computed():
    dense = run([("q", "a", 0.75), ("q", "b", 0.5), ("q", "c", 0.25)])
    sparse = run([("q", "b", 30.0), ("q", "d", 10.0), ("q", "a", 20.0)])
    cand = fusion_candidates(dense, sparse).to_pylist()
    by_pid = {row["passage_id"]: row for row in cand}
    # dense: min .25, max .75 -> (s - .5) / .5 ; d missing -> filled with min .25 -> -.5
    assert by_pid["a"]["dense_score"] == pytest.approx(0.5, abs=1e-6)
    assert by_pid["b"]["dense_score"] == pytest.approx(0.0, abs=1e-6)
    assert by_pid["d"]["dense_score"] == pytest.approx(-0.5, abs=1e-6)
    # sparse: min 10, max 30 -> (s - 20) / 20 ; c missing -> 10 -> -.5
    assert by_pid["b"]["sparse_score"] == pytest.approx(0.5)
    assert by_pid["a"]["sparse_score"] == pytest.approx(0.0)
    assert by_pid["c"]["sparse_score"] == pytest.approx(-0.5)
    assert by_pid["d"]["dense_rank"] is None and by_pid["c"]["sparse_rank"] is None
    fused = fuse(fusion_candidates(dense, sparse), alpha=1.0, k=3).to_pylist()
    # a: .5 + 0 = .5 ; b: 0 + .5 = .5 ; c: -.5 - .5 ; d: -.5 - .5 (ties: better dense rank first)
    assert [r["passage_id"] for r in fused] == ["a", "b", "c"]
    assert [r["rank"] for r in fused] == [1, 2, 3]
    assert fused[0]["score"] == pytest.approx(0.5)


def test_alpha_zero_equals_dense_ranking():
    dense, sparse = random_runs(0)
    fused = hybrid_run(dense, sparse, alpha=0.0, k=100)
    for qid in ("q0", "q7", "q29"):
        d = dense.filter(pa.compute.equal(dense["question_id"], qid)).to_pylist()
        expected = [r["passage_id"] for r in sorted(d, key=lambda r: -r["score"])]
        got = fused.filter(pa.compute.equal(fused["question_id"], qid))
        assert got.column("passage_id").to_pylist() == expected
        assert np.all(np.diff(got.column("score").to_numpy()) <= 0)


def test_depth_limits_candidates_and_k_limits_output():
    dense, sparse = random_runs(1, nq=3)
    cand = fusion_candidates(dense, sparse, depth=10)
    per_q = {q: sum(1 for x in cand.column("question_id").to_pylist() if x == q) for q in ("q0", "q1", "q2")}
    assert all(10 <= n <= 20 for n in per_q.values())
    assert max(r for r in cand.column("dense_rank").to_pylist() if r is not None) == 10
    assert fuse(cand, 1.0, k=5).num_rows == 15


def _one_question(qid: str, threshold: float, answer_wins_above: bool):
    """A question whose only answer-bearing passage tops the fused list iff alpha > threshold
    (answer_wins_above) or alpha < threshold (otherwise). Derivation: dense X=1, H=0, Z=.5 ->
    normalised X=.5, H=-.5, Z=0; BM25 H=1, X=1-1/t, Z=0 -> H=.5, X=.5-1/t, Z=-.5; so
    fused(H) - fused(X) = -1 + alpha/t, and Z never leads."""
    dense = [(qid, f"{qid}-X", 1.0), (qid, f"{qid}-H", 0.0), (qid, f"{qid}-Z", 0.5)]
    sparse = [(qid, f"{qid}-H", 1.0), (qid, f"{qid}-X", 1.0 - 1.0 / threshold), (qid, f"{qid}-Z", 0.0)]
    hit = f"{qid}-H" if answer_wins_above else f"{qid}-X"
    texts = {f"{qid}-{n}": f"passage {n} about something else" for n in "XHZ"}
    texts[hit] = "the answer is zanzibar indeed"
    return dense, sparse, texts


def test_tune_alpha_picks_the_best_dev_value():
    dense, sparse, texts = [], [], {}
    # Two questions need alpha > 1.15, two need alpha < 1.25: only alpha = 1.2 gets all four.
    for qid, t, above in (("a", 1.15, True), ("b", 1.12, True), ("c", 1.25, False), ("d", 1.29, False)):
        d, s, tx = _one_question(qid, t, above)
        dense += d
        sparse += s
        texts.update(tx)
    answers = {q: ["Zanzibar"] for q in "abcd"} | {"e": ["never retrieved"]}
    cand = fusion_candidates(run(dense), run(sparse))
    result = tune_alpha(cand, candidate_hits(cand, answers, texts), len(answers), k=1)
    assert result.best_alpha == 1.2
    assert result.dense_only == pytest.approx(2 / 5)  # dense alone ranks X first: right for "c" and "d"
    assert result.recall[1.2] == pytest.approx(4 / 5)  # "e" has no candidates: a miss
    assert result.recall[1.1] == pytest.approx(2 / 5) and result.recall[1.3] == pytest.approx(2 / 5)
    assert list(result.recall) == list(DEFAULT_ALPHAS)


def test_recall_matches_bruteforce_per_alpha():
    dense, sparse = random_runs(2, nq=20, depth=30, pool=60)
    rng = np.random.default_rng(3)
    texts = {f"p{i}": ("contains Lisbon here" if rng.random() < 0.05 else f"filler {i}") for i in range(60)}
    answers = {f"q{i}": ["lisbon"] for i in range(20)}
    cand = fusion_candidates(dense, sparse, depth=30)
    hits = candidate_hits(cand, answers, texts)
    for alpha in (0.5, 1.3, 2.0):
        fused = fuse(cand, alpha, k=5).to_pylist()
        found = {r["question_id"] for r in fused if "Lisbon" in texts[r["passage_id"]]}
        assert recall_at_k(cand, hits, alpha, 5, 20) == pytest.approx(len(found) / 20)


def test_bad_run_is_named():
    with pytest.raises(ValueError, match=r"sparse run lacks column\(s\) \['score'\]"):
        fusion_candidates(run([("q", "a", 1.0)]), run([("q", "a", 1.0)]).drop_columns(["score"]))
