"""Qrels metrics equal ranx's (the library odqa computed them with before) per question, on what
the trec_eval fixture does not hold: graded judgments (0 to 3), questions judged only 0, a
passage listed twice in one question's ranking, judged questions the run never retrieved for and
unjudged ones it did, cut-offs 1 to 100 over rankings of up to 150 passages.

ranx is run here, live (it comes with the dev extra), on a seeded random run: its `make_comparable`
gives the BEIR convention odqa follows."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from odqa.pipelines.evaluation.metrics import qrels_scores

ranx = pytest.importorskip("ranx")

METRICS = ("MAP@100", "MRR@100", "MRR@10", "Recall@100", "nDCG@10", "P@1", "nDCG@3", "P@5", "MAP@5", "Recall@5")
RANX_NAMES = {"MAP": "map", "MRR": "mrr", "Recall": "recall", "nDCG": "ndcg", "P": "precision"}


def _random_run_and_qrels(seed: int) -> tuple[dict[str, list[str]], dict[str, dict[str, int]]]:
    rng = random.Random(seed)
    run: dict[str, list[str]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for i in range(200):
        qid = f"q{i}"
        ranking = [f"d{d}" for d in rng.sample(range(400), rng.randint(0, 150))]
        if rng.random() < 0.1:
            ranking += ranking[:3]  # listed twice
        if rng.random() < 0.9:
            run[qid] = ranking
        if rng.random() < 0.05:
            qrels[qid] = {f"d{d}": 0 for d in rng.sample(range(400), 3)}  # judged, none relevant
        elif rng.random() < 0.9:
            qrels[qid] = {f"d{d}": rng.choice([0, 1, 1, 2, 3]) for d in rng.sample(range(400), rng.randint(1, 12))}
    run["unjudged"] = ["d1", "d2"]
    return run, qrels


def _ranx_scores(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    scored = {qid: {pid: 1.0 / rank for rank, pid in enumerate(pids, start=1)} for qid, pids in run.items() if pids}
    ranx_run = ranx.Run.from_dict(scored)
    names = {name: f"{RANX_NAMES[name.split('@')[0]]}@{name.split('@')[1]}" for name in METRICS}
    ranx.evaluate(ranx.Qrels.from_dict(qrels), ranx_run, list(names.values()), make_comparable=True)
    return {name: {qid: float(value) for qid, value in ranx_run.scores[ranx_name].items()}
            for name, ranx_name in names.items()}  # fmt: skip


def test_per_question_values_equal_ranx_on_graded_judgments() -> None:
    run, qrels = _random_run_and_qrels(seed=7)
    table = pa.table({"question_id": [q for q, pids in run.items() for _ in pids],
                      "passage_id": [p for pids in run.values() for p in pids],
                      "rank": pa.array([r for pids in run.values() for r in range(1, len(pids) + 1)], pa.int32())})  # fmt: skip
    ours = qrels_scores(table, qrels, METRICS)
    theirs = _ranx_scores(run, qrels)
    assert any(2 in judged.values() for judged in qrels.values()) and any(q not in run for q in qrels)
    for name in METRICS:
        assert set(ours[name]) == set(qrels) == set(theirs[name]), name
        differing = {q: (ours[name][q], theirs[name][q]) for q in qrels if abs(ours[name][q] - theirs[name][q]) > 1e-12}
        assert not differing, (name, dict(list(differing.items())[:5]))
