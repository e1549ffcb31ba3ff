"""The papers' comparison table: compare's means and tests arranged per retriever, against a reference."""

from __future__ import annotations

import pytest

from odqa.pipelines.evaluation.experiment_table import (
    Entry,
    comparisons_of,
    display_rows,
    experiment_rows,
    metric_rows,
    parameter_ratio,
    render_experiment_plot,
    significance_rows,
)

ENTRIES = [Entry("BM25", "bm25-run"), Entry("DPR", "dpr-run", "dpr", 200), Entry("TASER", "taser-run", "taser", 110)]
MEANS = [{"dataset": "nq", "split": "test", "run": run, "metric": metric, "value": value}
         for run, values in {"bm25-run": (0.5, 0.7), "dpr-run": (0.6, 0.8), "taser-run": (0.65, 0.9)}.items()
         for metric, value in zip(("R@1", "R@20"), values, strict=True)]  # fmt: skip


def _test(a: str, b: str, metric: str, mean_a: float, mean_b: float, p: float, significant: bool) -> dict:
    return {"dataset": "nq", "split": "test", "metric": metric, "run_a": a, "run_b": b, "questions": 100,
            "mean_a": mean_a, "mean_b": mean_b, "t_statistic": 1.0, "p_value": p / 3, "p_bonferroni": p,
            "significant": significant}  # fmt: skip


COMPARED = [_test("bm25-run", "dpr-run", "R@20", 0.7, 0.8, 0.01, True), _test("bm25-run", "taser-run", "R@20", 0.7, 0.9, 0.001, True),
            _test("dpr-run", "taser-run", "R@20", 0.8, 0.9, 0.2, False), _test("dpr-run", "taser-run", "R@1", 0.6, 0.65, 0.04, True)]  # fmt: skip
LABELS = {e.run: e.label for e in ENTRIES}


def test_rows_carry_means_sizes_and_tests_oriented_against_the_reference() -> None:
    tests = comparisons_of(COMPARED, LABELS)
    rows = {r.label: r for r in experiment_rows(ENTRIES, "DPR", "nq", "test", MEANS, tests)}
    assert rows["TASER"].values == {"R@1": 0.65, "R@20": 0.9} and rows["TASER"].parameter_ratio == 0.55
    assert rows["BM25"].parameters is None and rows["BM25"].parameter_ratio is None and rows["DPR"].versus_reference == {}
    taser = rows["TASER"].versus_reference["R@20"]  # compare tested DPR vs TASER: flipped to TASER - DPR
    assert (taser.label_a, taser.label_b) == ("TASER", "DPR") and taser.diff == pytest.approx(0.1)
    bm25 = rows["BM25"].versus_reference["R@20"]
    assert bm25.diff == pytest.approx(-0.1) and bm25.significant and "R@1" not in rows["BM25"].versus_reference


def test_display_marks_significant_differences_and_metrics_rows_keep_every_pair() -> None:
    tests = comparisons_of(COMPARED, LABELS)
    rows = experiment_rows(ENTRIES, "DPR", "nq", "test", MEANS, tests)
    shown = {r["retriever"]: r for r in display_rows(rows, ["R@1", "R@20"], "DPR")}
    assert shown["TASER"]["R@1"] == "0.650*" and shown["TASER"]["R@20"] == "0.900"
    assert shown["BM25"]["R@20"] == "0.700*" and shown["BM25"]["parameters"] == "-"
    assert shown["TASER"]["vs DPR"] == "0.55x" and shown["DPR"]["parameters"] == "0.0M"
    assert {r["retrievers"] for r in significance_rows(rows, ["R@20"])} == {"BM25 vs DPR", "TASER vs DPR"}
    stored = {(r["group"], r["metric"]): r["value"] for r in metric_rows("experiment:x", rows, tests)}
    assert stored[("TASER", "R@20")] == 0.9 and stored[("TASER", "parameters")] == 110.0
    assert stored[("BM25 vs TASER", "R@20 p_bonferroni")] == 0.001
    assert stored[("DPR vs TASER", "R@1 diff")] == pytest.approx(-0.05)
    assert parameter_ratio(ENTRIES, "TASER", "DPR") == 0.55
    with pytest.raises(ValueError, match="parameter counts"):
        parameter_ratio(ENTRIES, "BM25", "DPR")
    with pytest.raises(ValueError, match="reference 'SDE'"):
        experiment_rows(ENTRIES, "SDE", "nq", "test", MEANS, tests)


def test_the_plot_is_a_png() -> None:
    rows = experiment_rows(ENTRIES, "DPR", "nq", "test", MEANS, comparisons_of(COMPARED, LABELS))
    assert render_experiment_plot(rows, ["R@1", "R@20"], "TASER vs DPR", "DPR").startswith(b"\x89PNG\r\n\x1a\n")
