"""`odqa experiment dual-encoders` and `odqa experiment taser` on the bundled sample (tiny budgets):
the table with significance and parameter counts, the plot, the Prefect artifacts, the metrics rows,
and that the tests are `odqa compare`'s own."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from odqa.storage import Workspace
from tests.models.switched_options import switched_on
from tests.ops.prefect_artifacts import latest_artifact

BUDGET = ["--train", "trex:train", "--evaluate", "trex:test", "--max-steps", "1", "--batch-size", "4"]
PNG = b"\x89PNG\r\n\x1a\n"


def _table_lines(output: str, labels: list[str]) -> dict[str, list[str]]:
    """label -> the cells of its line in the printed table."""
    return {line.split()[0]: line.split() for line in output.splitlines() if line.split()[:1] and line.split()[0] in labels
            and "trex/test" in line}  # fmt: skip


def test_dual_encoders_experiment_gives_table_plot_artifact_and_metrics(cli, sample_copy: Path,
                                                                        tiny_encoder: str) -> None:  # fmt: skip
    # Three of the six default archs: every arch costs the same handful of flow runs here, and the
    # table, tests and plot are made the same way for any number of them.
    # The trainer's speed options reach every training of the experiment.
    switches, recorded = switched_on()
    out = cli("-w", str(sample_copy), "experiment", "dual-encoders", "--archs", "sde,ade,taser", "--base",
              tiny_encoder, *BUDGET, "--bucket-tokens", "64", *switches).output  # fmt: skip
    labels = ["SDE", "ADE", "TASER"]
    lines = _table_lines(out, labels)
    assert sorted(lines) == sorted(labels), out
    assert "* = significantly different from SDE" in out and "tests against SDE:" in out
    ws = Workspace.resolve(sample_copy)
    counts = {r["model_id"]: r["parameters"] for r in ws.sql("SELECT model_id, parameters FROM models").to_pylist()}
    for label, cells in lines.items():
        model = f"dual-encoders-{label.lower()}-round1"
        assert cells[2] == f"{counts[model] / 1e6:.1f}M", cells  # the parameter count of the trained model
        assert cells[3] == f"{counts[model] / counts['dual-encoders-sde-round1']:.2f}x", cells
    assert counts["dual-encoders-ade-round1"] > 1.9 * counts["dual-encoders-sde-round1"]  # two towers vs one
    # every arch trains on its own copy of the same questions: their BM25 negatives are searched once
    train = ws.sql("SELECT count(*) AS n FROM questions WHERE dataset = 'trex' AND split = 'train'")["n"][0].as_py()
    assert f"BM25 negatives: {train} questions searched, {2 * train} reused across the 3 retrievers" in out, out
    for row in ws.sql("SELECT config FROM models").to_pylist():
        training = json.loads(row["config"])["training"]
        assert training["bucket_tokens"] == 64 and {name: training[name] for name in recorded} == recorded

    plot = ws.plots_dir / "experiment-dual-encoders.png"
    assert f"plot: {plot}" in out and plot.read_bytes().startswith(PNG)
    table = asyncio.run(latest_artifact("experiment-dual-encoders"))
    assert table["type"] == "table" and all(label in str(table["data"]) for label in labels)
    tests = asyncio.run(latest_artifact("experiment-dual-encoders-tests"))
    assert tests["type"] == "table" and "p_bonferroni" in str(tests["data"])
    links = asyncio.run(latest_artifact("experiment-dual-encoders-plots"))
    assert f"![{plot.name}](data:image/png;base64," in links["data"]  # the plot itself, shown in the UI

    rows = ws.sql("SELECT \"group\", metric, value FROM metrics WHERE run = 'experiment:dual-encoders' "
                  "AND dataset = 'trex' AND split = 'test'").to_pylist()  # fmt: skip
    values = {(r["group"], r["metric"]): r["value"] for r in rows}
    assert {(label, "R@20") for label in labels} <= set(values)
    assert values[("ADE", "parameters")] == counts["dual-encoders-ade-round1"]
    pairs = [g for g, m in values if m == "R@20 p_bonferroni"]
    assert len(pairs) == 3  # every pair of the three

    # The experiment's tests are those of `odqa compare` (compare_flow) over the same runs.
    from odqa.flows.compositions.compare import compare_flow

    runs = {f"dual-encoders-{label.lower()}-round1-trex-test": label for label in labels}
    compared = compare_flow(runs=list(runs), ks=[1, 5, 20, 100], workspace=str(sample_copy)).comparisons
    for test in compared:
        pair = f"{runs[test['run_a']]} vs {runs[test['run_b']]}"
        assert values[(pair, f"{test['metric']} p_bonferroni")] == test["p_bonferroni"]
        assert values[(pair, f"{test['metric']} diff")] == test["mean_a"] - test["mean_b"]


def test_taser_experiment_sets_taser_beside_dpr_bm25_and_the_hybrids(cli, sample_copy: Path, tiny_encoder: str) -> None:
    out = cli("-w", str(sample_copy), "experiment", "taser", "--base", tiny_encoder, "--rounds", "1", "--holdout", "0.2",
              *BUDGET).output  # fmt: skip
    assert "* = significantly different from DPR" in out
    ws = Workspace.resolve(sample_copy)
    counts = {r["model_id"]: r["parameters"] for r in ws.sql("SELECT model_id, parameters FROM models").to_pylist()}
    ratio = counts["taser-taser-round1"] / counts["taser-dpr-round1"]
    assert f"parameter ratios: TASER/DPR {ratio:.3f}" in out and ratio < 0.6  # one encoder with experts vs two
    for label in ("BM25", "DPR", "DPR + BM25", "TASER", "TASER + BM25"):
        assert any(line.startswith(f"{label} ") and "trex/test" in line for line in out.splitlines()), (label, out)
    bm25 = ws.sql("SELECT value FROM metrics WHERE run = 'bm25-trex-test' AND metric = 'R@20' AND \"group\" = ''")
    stored = ws.sql("SELECT value FROM metrics WHERE run = 'experiment:taser' AND \"group\" = 'BM25' "
                    "AND metric = 'R@20'")  # fmt: skip
    assert stored["value"].to_pylist() == bm25["value"].to_pylist()
    assert (ws.plots_dir / "experiment-taser.png").read_bytes().startswith(PNG)
    assert asyncio.run(latest_artifact("experiment-taser"))["type"] == "table"
