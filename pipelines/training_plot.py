"""The picture of one training run: its loss curve and, when it had a dev set, dev R@K per evaluation.

`odqa train` keeps the curve (one entry per logged step: step, loss, lr, ...) and the dev history
(one entry per evaluation: step, R@1, R@5, ...); a train run's Prefect artifact shows this plot,
so a user sees from the UI whether the loss fell and where the best dev R@K was.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any


def recall_keys(history: Sequence[dict[str, Any]]) -> list[str]:
    """The R@K names of a dev history, ordered by K (R@1, R@5, R@20, R@100, not as strings)."""
    keys = {key for entry in history for key in entry if key.startswith("R@") and key[2:].isdigit()}
    return sorted(keys, key=lambda key: int(key[2:]))


def training_figure(curve: Sequence[dict[str, Any]], dev_history: Sequence[dict[str, Any]], title: str) -> Any:
    """The matplotlib Figure of training loss against step (one marker per logged step) and, on
    a second axis, each dev R@K against step; the legend sits below the axes, never on the data."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    points = [(entry["step"], entry["loss"]) for entry in curve if entry.get("loss") is not None]
    if not points:
        raise ValueError("the training log has no loss to plot")
    figure = Figure(figsize=(6.4, 4.6), dpi=120, layout="constrained")
    axes = figure.subplots()
    axes.plot([s for s, _ in points], [loss for _, loss in points], color="tab:blue",
              marker="o" if len(points) <= 200 else None, markersize=3, label="training loss")  # fmt: skip
    axes.set_xlabel("optimizer step")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    axes.set_ylabel("training loss")
    axes.grid(True, alpha=0.3)
    handles, labels = axes.get_legend_handles_labels()
    if dev_history:
        recall = axes.twinx()
        steps = [entry["step"] for entry in dev_history]
        for key in recall_keys(dev_history):
            recall.plot(steps, [100.0 * entry[key] for entry in dev_history], marker="o", linestyle="--",
                        label=f"dev {key}")  # fmt: skip
        recall.set_ylabel("dev R@K (%)")
        recall.set_ylim(0, 100)
        more_handles, more_labels = recall.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    figure.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 5), fontsize="small")
    axes.set_title(title)
    return figure


def render_training_plot(curve: Sequence[dict[str, Any]], dev_history: Sequence[dict[str, Any]],
                         title: str) -> bytes:  # fmt: skip
    """PNG of `training_figure`."""
    buffer = io.BytesIO()
    training_figure(curve, dev_history, title).savefig(buffer, format="png")
    return buffer.getvalue()
