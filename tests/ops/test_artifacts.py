"""Evaluation results become Prefect artifacts (a table, and markdown that shows the plots as
embedded images: a browser refuses file:// links from the UI's page)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from odqa.flows.plumbing.artifacts import artifact_key, publish_evaluation, publish_table
from tests.ops.prefect_artifacts import latest_artifact


def test_keys_are_valid_prefect_artifact_keys() -> None:
    assert artifact_key("evaluation-BM25 trex/test") == "evaluation-bm25-trex-test"
    assert artifact_key("!!!") == "odqa"


def test_outside_a_flow_run_nothing_is_published() -> None:
    assert not publish_table("x", "y", [{"a": 1}])


def test_evaluation_metrics_and_embedded_plots_are_published(prefect_harness, tmp_path: Path) -> None:
    import asyncio
    import base64

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot = tmp_path / "recall-bm25.png"
    figure, axes = plt.subplots(figsize=(3, 2))
    axes.plot([1, 5, 20], [0.5, 0.8, 0.9])
    figure.savefig(plot)
    plt.close(figure)

    @flow
    def evaluate_like() -> bool:
        rows = [{"dataset": "trex", "split": "test", "metric": "R@20", "value": 0.91234}]
        return publish_evaluation("bm25-demo", str(plot), rows)

    assert evaluate_like()
    table = asyncio.run(latest_artifact("evaluation-bm25-demo"))
    assert table["type"] == "table" and "0.9123" in str(table["data"]) and "R@20" in str(table["data"])
    shown = asyncio.run(latest_artifact("evaluation-bm25-demo-plots"))
    embedded = f"![recall-bm25.png](data:image/png;base64,{base64.b64encode(plot.read_bytes()).decode()})"
    assert shown["type"] == "markdown" and embedded in shown["data"] and str(plot.resolve()) in shown["data"]
    assert "file://" not in shown["data"]


def test_a_training_artifact_shows_dev_recall_by_k_and_the_loss_curve() -> None:
    import base64
    import io
    import re

    from PIL import Image

    from odqa.flows.plumbing.artifacts import training_markdown

    curve = [{"step": step, "loss": 2.0 / step} for step in range(1, 11)]
    history = [{"step": 5, "R@1": 0.25, "R@100": 1.0, "R@20": 0.75, "R@5": 0.5},
               {"step": 10, "R@1": 0.5, "R@100": 1.0, "R@20": 0.75, "R@5": 0.5}]  # fmt: skip
    markdown = training_markdown("m1", "toy:dev", {"step": 10, "metrics": history[1]}, curve, history)
    assert "| R@1 | R@5 | R@20 | R@100 |" in markdown  # ordered by K, not as strings
    assert "| 0.5000 | 0.5000 | 0.7500 | 1.0000 |" in markdown and "best at step 10" in markdown
    png = base64.b64decode(re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)\)", markdown).group(1))
    assert Image.open(io.BytesIO(png)).size[0] >= 600

    without_dev = training_markdown("m2", None, {"step": None, "metrics": {}}, curve, [])
    assert "`dev` was empty" in without_dev and "data:image/png;base64," in without_dev
    assert "| R@1" not in without_dev
