"""Qrels metrics equal ranx's (the library odqa computed them with before) per question, on what
the trec_eval fixture does not hold: graded judgments (0 to 3), questions judged only 0, a
passage listed twice in one question's ranking, judged questions the run never retrieved for and
an unjudged one it did, cut-offs 1 to 100 over rankings of up to 120 passages.

ranx's figures were computed once (`generate/ranx_metrics.py`) and stored: run live, ranx's numba
code compiled for ~2 minutes of CPU in each fresh environment."""

from __future__ import annotations

import pyarrow as pa

from odqa.pipelines.evaluation.metrics import qrels_scores

from .conftest import reference_figures

FIXTURE = reference_figures("ranx_metrics.json")


def test_per_question_values_equal_ranx_on_graded_judgments() -> None:
    run = {qid: [f"d{d}" for d in ranking] for qid, ranking in FIXTURE["run"].items()}
    qrels = {qid: {f"d{d}": rel for d, rel in judged.items()} for qid, judged in FIXTURE["qrels"].items()}
    table = pa.table({"question_id": [q for q, pids in run.items() for _ in pids],
                      "passage_id": [p for pids in run.values() for p in pids],
                      "rank": pa.array([r for pids in run.values() for r in range(1, len(pids) + 1)], pa.int32())})  # fmt: skip
    assert any(2 in judged.values() for judged in qrels.values()) and any(q not in run for q in qrels)
    assert any(len(set(pids)) < len(pids) for pids in run.values())  # a passage listed twice
    ours = qrels_scores(table, qrels, list(FIXTURE["ranx"]))
    for name, theirs in FIXTURE["ranx"].items():
        assert set(ours[name]) == set(qrels) == set(theirs), name
        differing = {q: (ours[name][q], theirs[q]) for q in qrels if abs(ours[name][q] - theirs[q]) > 1e-12}
        assert not differing, (name, dict(list(differing.items())[:5]))
