"""The loss curve of a train run (its artifact's plot, pipelines/training_plot.py) has a point for
every step whose loss the run's log shows, and its legend sits clear of the data."""

from __future__ import annotations

import logging
import re

import pytest

from odqa.models.data import MultiSetSampler
from odqa.models.retriever import create_retriever
from odqa.models.trainer import Trainer, TrainingConfig
from odqa.pipelines.progress import LOGGER_NAME

LOGGED = re.compile(r"train \S+: (?P<step>\d+)/\d+ step .* loss=(?P<loss>\S+)")


def test_every_logged_loss_is_a_point_of_the_curve_and_the_legend_covers_none(
        tiny_checkpoint, toy_examples, tmp_path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("ODQA_PROGRESS", "log")  # as on a Prefect worker: progress records, not a bar
    monkeypatch.setenv("ODQA_PROGRESS_INTERVAL", "0")  # a record every step (30 s apart by default)
    config = TrainingConfig(output_dir=str(tmp_path), batch_size=4, max_steps=6, warmup_steps=0, progress=True)
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        result = Trainer(create_retriever("sde", tiny_checkpoint), MultiSetSampler.single(toy_examples), config).train()
    logged = {int(m["step"]): float(m["loss"]) for r in caplog.records if (m := LOGGED.search(r.getMessage()))}
    assert sorted(logged) == [1, 2, 3, 4, 5, 6]  # the records: every step, then the closing one again (step 6)
    assert [entry["step"] for entry in result.log] == sorted(logged)  # the curve keeps each of them

    from odqa.pipelines.training_plot import training_figure

    history = [{"step": 3, "R@1": 0.25, "R@5": 0.75, "R@20": 1.0}, {"step": 6, "R@1": 0.5, "R@5": 1.0, "R@20": 1.0}]
    figure = training_figure(result.log, history, "t")
    loss_line = figure.axes[0].lines[0]
    assert list(loss_line.get_xdata()) == sorted(logged)
    assert list(loss_line.get_ydata()) == pytest.approx([logged[s] for s in sorted(logged)], rel=1e-3)
    assert loss_line.get_marker() not in (None, "None", "")  # each point drawn, not only the line through them

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)  # laid out as the PNG is drawn
    canvas.draw()
    renderer = canvas.get_renderer()
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == ["training loss", "dev R@1", "dev R@5", "dev R@20"]
    box = legend.get_window_extent(renderer)
    assert not any(box.overlaps(axes.get_window_extent(renderer)) for axes in figure.axes)
