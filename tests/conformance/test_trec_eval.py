"""Qrels metrics equal trec_eval's (figures from pytrec_eval, which runs trec_eval's own C code) per
question: MRR@10/100 (trec_eval's recip_rank on the run cut at 10 / 100), nDCG@3/10 (ndcg_cut),
Recall@100 (recall_100), MAP@100 (map_cut_100) and P@1 (P_1).

The fixture run has 8 questions with 5 to 125 ranked passages: relevant passages at ranks 1, 4,
10, 11, 16, 61, 100, 101 and 102, relevant passages never retrieved, a passage judged 0 at rank 1
and a question without any retrieved relevant passage. Scores are 1/rank, so trec_eval's order
(by score) is the run's ranks, as odqa evaluates them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from odqa.pipelines.evaluation.metrics import DEFAULT_QRELS_METRICS, mean_scores, qrels_scores

from .conftest import reference_figures

FIXTURE = reference_figures("trec_eval.json")


def _run_table(run: dict[str, list[str]]) -> pa.Table:
    rows = [(qid, pid, rank) for qid, pids in run.items() for rank, pid in enumerate(pids, start=1)]
    return pa.table({"question_id": [r[0] for r in rows], "passage_id": [r[1] for r in rows],
                     "rank": pa.array([r[2] for r in rows], pa.int32())})  # fmt: skip


def test_per_question_values_equal_trec_eval():
    assert set(FIXTURE["trec_eval"]) == set(DEFAULT_QRELS_METRICS)
    ours = qrels_scores(_run_table(FIXTURE["run"]), FIXTURE["qrels"])
    for metric, per_question in FIXTURE["trec_eval"].items():
        assert set(ours[metric]) == set(per_question), metric
        for qid, value in per_question.items():
            assert ours[metric][qid] == pytest.approx(value, abs=1e-12), (metric, qid)
    means = {v.metric: v.value for v in mean_scores(ours)}
    for metric, per_question in FIXTURE["trec_eval"].items():
        assert means[metric] == pytest.approx(sum(per_question.values()) / len(per_question), abs=1e-12)


def test_the_fixture_tells_the_cut_offs_apart():
    """The run reaches past rank 100 and holds hits between 10 and 100, so a wrong cut-off fails."""
    figures = FIXTURE["trec_eval"]
    assert figures["MRR@10"] != figures["MRR@100"]
    assert any(v not in (0.0, 1.0) for v in figures["Recall@100"].values())
    assert max(len(pids) for pids in FIXTURE["run"].values()) > 100
