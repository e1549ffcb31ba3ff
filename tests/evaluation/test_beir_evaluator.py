"""A squad24 BM25 run and a dense run evaluated by BEIR's own evaluator give `odqa evaluate`'s
nDCG@10, MRR@10 and Recall@100 to 1e-6. The runs and qrels go through the exported files: TREC run
and BEIR qrels.

BEIR's functions round every figure to 5 decimals as their last step (`round(x / n, 5)`); the test
runs BEIR's own code with its modules' `round` made the identity, so the figures compared are
BEIR's before that rounding, and also checks the rounded ones are those figures rounded
(see docs/interop.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import shared_data
from tests.experiments.tiny_encoder import write_tiny_encoder

pytest.importorskip("beir")
TOLERANCE = 1e-6


def _trec_results(path: Path, by_rank: bool) -> dict[str, dict[str, float]]:
    """The run as BEIR's results: the file's scores, or 1/rank (the run's own order, as odqa
    scores it; trec_eval orders tied scores by passage id instead)."""
    results: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        qid, _, pid, rank, score, _ = line.split()
        results.setdefault(qid, {})[pid] = 1 / int(rank) if by_rank else float(score)
    return results


def _beir_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines()[1:]:
        qid, pid, score = line.split("\t")
        qrels.setdefault(qid, {})[pid] = int(score)
    return qrels


def _beir_figures(
    qrels: dict, results: dict, unrounded: bool, monkeypatch: pytest.MonkeyPatch
) -> dict[str, float]:
    """nDCG@10, Recall@100 (`EvaluateRetrieval.evaluate`: pytrec_eval) and MRR@10 (`evaluate_custom`)
    as BEIR computes them; `unrounded`: with `round` in BEIR's two modules the identity."""
    from beir.retrieval import custom_metrics, evaluation

    with monkeypatch.context() as patch:
        if unrounded:
            for module in (evaluation, custom_metrics):  # a module global shadows the builtin
                patch.setattr(module, "round", lambda value, digits=None: value, raising=False)
        ndcg, _, recall, _ = evaluation.EvaluateRetrieval.evaluate(qrels, results, [10, 100])
        mrr = evaluation.EvaluateRetrieval.evaluate_custom(qrels, results, [10], metric="mrr")
    return {"nDCG@10": ndcg["NDCG@10"], "MRR@10": mrr["MRR@10"], "Recall@100": recall["Recall@100"]}


@pytest.mark.timeout(1200)
def test_beir_evaluator_agrees_with_odqa_evaluate(cli, java, tmp_path, monkeypatch):

    squad = shared_data("squad24")  # skips when ../shared/data is absent
    w = ("-w", str(tmp_path / "ws"))
    cli(*w, "import", "passages", "--format", "dpr-tsv", str(squad / "passages.tsv"))
    cli(*w, "import", "questions", "--format", "dpr-json", "--dataset", "squad24", "--split", "dev",
        str(squad / "dev.dpr.json"))  # fmt: skip
    cli(*w, "bm25", "index", "--threads", "1")
    model = write_tiny_encoder(tmp_path / "tiny")
    cli(*w, "encode", "--model", model, "--batch-size", "64")
    cli(*w, "index", "build", "--model", model, "--type", "flat")
    cli(*w, "export", "beir", "squad24", "dev", "--out", str(tmp_path / "beir"))
    qrels = _beir_qrels(tmp_path / "beir" / "qrels" / "dev.tsv")
    assert len(qrels) == 1433
    for run, options in {
        "bm25-dev": ["--retriever", "bm25"],
        "dense-dev": ["--retriever", "dense", "--model", model],
    }.items():
        trec = tmp_path / f"{run}.trec"
        cli(*w, "retrieve", *options, "--dataset", "squad24", "--split", "dev", "--run", run, "--k", "100",
            "--trec", str(trec))  # fmt: skip
        cli(*w, "evaluate", "--run", run)
        rows = cli(*w, "sql", f"SELECT metric, value FROM metrics WHERE run = '{run}' AND \"group\" = ''",
                   "--format", "json").output  # fmt: skip
        ours = {r["metric"]: r["value"] for r in map(json.loads, filter(str.strip, rows.splitlines()))}
        # BM25's scores order the run as its ranks do; the tiny random dense model ties scores,
        # which trec_eval breaks by passage id, so its run goes to BEIR with 1/rank scores.
        results = _trec_results(trec, by_rank=run == "dense-dev")
        assert set(results) == set(qrels)  # every judged question has results: both average over the same set
        beir = _beir_figures(qrels, results, unrounded=True, monkeypatch=monkeypatch)
        rounded = _beir_figures(qrels, results, unrounded=False, monkeypatch=monkeypatch)
        for metric, value in beir.items():
            assert rounded[metric] == round(value, 5), (run, metric)  # the patch removed only the rounding
            assert ours[metric] == pytest.approx(value, abs=TOLERANCE), (run, metric)
