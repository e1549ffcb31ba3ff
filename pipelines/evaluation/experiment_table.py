"""The papers' comparison tables: retrievers side by side with their parameter counts and the
significance of each one's difference from a reference retriever.

The figures come from `compare` (flows/evaluation.py compare_flow over metrics.compare_runs):
its means per run and metric, and its paired two-sided t-tests, Bonferroni-corrected over every
pair of runs compared. This module only arranges them: one row per retriever and question set,
a printable form with significance marks, rows for the `metrics` table, and a bar chart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SIGNIFICANT_MARK = "*"


@dataclass(frozen=True)
class Entry:
    """One retriever of an experiment: its label, the run it made on a question set, its size."""

    label: str  # "TASER", "TASER + BM25", "ADE-SPL", "BM25"
    run: str
    model: str | None = None  # the dense model (None for BM25)
    parameters: int | None = None  # None: no trained parameters (BM25)


@dataclass(frozen=True)
class Comparison:
    """One paired t-test of `compare` between two retrievers on one metric."""

    dataset: str
    split: str
    metric: str
    label_a: str
    label_b: str
    questions: int
    mean_a: float
    mean_b: float
    p_value: float
    p_bonferroni: float
    significant: bool

    @property
    def diff(self) -> float:
        return self.mean_a - self.mean_b


@dataclass(frozen=True)
class ExperimentRow:
    """One retriever on one question set."""

    label: str
    run: str
    model: str | None
    parameters: int | None
    parameter_ratio: float | None  # parameters / the reference's (None when either has none)
    dataset: str
    split: str
    values: dict[str, float]  # metric -> mean over the questions
    versus_reference: dict[str, Comparison] = field(default_factory=dict)  # empty for the reference


def k_order(metric: str) -> tuple[str, int]:
    """Sort key putting R@1 before R@5 before R@20 (name, then the cut-off as a number)."""
    match = re.fullmatch(r"(.*?)@(\d+)", metric)
    return (match.group(1), int(match.group(2))) if match else (metric, 0)


def comparisons_of(compared: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> list[Comparison]:
    """`compare`'s test rows (run_a, run_b, ...) as Comparisons between retriever labels."""
    return [Comparison(c["dataset"], c["split"], c["metric"], labels[c["run_a"]], labels[c["run_b"]],
                       int(c["questions"]), float(c["mean_a"]), float(c["mean_b"]), float(c["p_value"]),
                       float(c["p_bonferroni"]), bool(c["significant"]))
            for c in compared]  # fmt: skip


def _versus(tests: Sequence[Comparison], label: str, reference: str) -> dict[str, Comparison]:
    """label's tests against the reference, oriented label - reference."""
    found = {}
    for c in tests:
        if (c.label_a, c.label_b) == (label, reference):
            found[c.metric] = c
        elif (c.label_a, c.label_b) == (reference, label):
            found[c.metric] = Comparison(c.dataset, c.split, c.metric, label, reference, c.questions, c.mean_b,
                                         c.mean_a, c.p_value, c.p_bonferroni, c.significant)  # fmt: skip
    return found


def experiment_rows(entries: Sequence[Entry], reference: str, dataset: str, split: str,
                    means: Sequence[Mapping[str, Any]], tests: Sequence[Comparison]) -> list[ExperimentRow]:  # fmt: skip
    """One row per entry on (dataset, split): its means from `compare` and its tests against
    the reference entry (which must be one of them)."""
    by_label = {e.label: e for e in entries}
    if reference not in by_label:
        raise ValueError(f"reference {reference!r} is not one of the retrievers {sorted(by_label)}")
    ref_parameters = by_label[reference].parameters
    rows = []
    for entry in entries:
        values = {m["metric"]: float(m["value"]) for m in means
                  if m["run"] == entry.run and m["dataset"] == dataset and m["split"] == split}  # fmt: skip
        ratio = entry.parameters / ref_parameters if entry.parameters and ref_parameters else None
        versus = {} if entry.label == reference else _versus(
            [t for t in tests if (t.dataset, t.split) == (dataset, split)], entry.label, reference)
        rows.append(ExperimentRow(entry.label, entry.run, entry.model, entry.parameters, ratio, dataset, split,
                                  dict(sorted(values.items(), key=lambda kv: k_order(kv[0]))), versus))  # fmt: skip
    return rows


def parameter_ratio(entries: Sequence[Entry], numerator: str, denominator: str) -> float:
    """Parameters of one retriever over another's (TASER's over DPR's, the paper's headline)."""
    by_label = {e.label: e.parameters for e in entries}
    top, bottom = by_label.get(numerator), by_label.get(denominator)
    if not top or not bottom:
        raise ValueError(f"both {numerator!r} and {denominator!r} need parameter counts, got {top} and {bottom}")
    return top / bottom


def format_parameters(count: int | None) -> str:
    return "-" if count is None else f"{count / 1e6:.1f}M"


def display_rows(rows: Sequence[ExperimentRow], metrics: Sequence[str], reference: str) -> list[dict[str, Any]]:
    """The table to print or publish: one line per retriever and question set, each metric with
    a mark when it differs significantly from the reference (paired t-test, Bonferroni)."""
    table = []
    for row in rows:
        line: dict[str, Any] = {"retriever": row.label, "questions": f"{row.dataset}/{row.split}",
                                "parameters": format_parameters(row.parameters),
                                f"vs {reference}": "-" if row.parameter_ratio is None else f"{row.parameter_ratio:.2f}x"}  # fmt: skip
        for metric in metrics:
            value = row.values.get(metric)
            test = row.versus_reference.get(metric)
            mark = SIGNIFICANT_MARK if test is not None and test.significant else ""
            line[metric] = "-" if value is None else f"{value:.3f}{mark}"
        table.append(line)
    return table


def significance_rows(rows: Sequence[ExperimentRow], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Each retriever's tests against the reference: difference, p and Bonferroni-corrected p."""
    found = []
    for row in rows:
        for metric in metrics:
            test = row.versus_reference.get(metric)
            if test is not None:
                found.append({"questions": f"{row.dataset}/{row.split}", "metric": metric,
                              "retrievers": f"{test.label_a} vs {test.label_b}", "diff": f"{test.diff:+.3f}",
                              "p": f"{test.p_value:.3g}", "p_bonferroni": f"{test.p_bonferroni:.3g}",
                              "significant": SIGNIFICANT_MARK if test.significant else ""})  # fmt: skip
    return found


def metric_rows(run: str, rows: Sequence[ExperimentRow], tests: Sequence[Comparison]) -> list[dict[str, Any]]:
    """Rows for the `metrics` table (run, dataset, split, metric, value, group): each retriever's
    means and parameter count (group = its label), and every pairwise test's difference and
    corrected p (group = "A vs B", metric = "<metric> diff" / "<metric> p_bonferroni")."""
    out = []
    for row in rows:
        base = {"run": run, "dataset": row.dataset, "split": row.split, "group": row.label}
        out += [{**base, "metric": metric, "value": value} for metric, value in row.values.items()]
        if row.parameters is not None:
            out.append({**base, "metric": "parameters", "value": float(row.parameters)})
        if row.parameter_ratio is not None:
            out.append({**base, "metric": "parameter_ratio", "value": row.parameter_ratio})
    for t in tests:
        base = {"run": run, "dataset": t.dataset, "split": t.split, "group": f"{t.label_a} vs {t.label_b}"}
        out += [{**base, "metric": f"{t.metric} diff", "value": t.diff},
                {**base, "metric": f"{t.metric} p_bonferroni", "value": t.p_bonferroni}]  # fmt: skip
    return out


def render_experiment_plot(rows: Sequence[ExperimentRow], metrics: Sequence[str], title: str, reference: str) -> bytes:
    """PNG: one panel per question set, grouped bars of each retriever's metrics (its parameter
    count under its name; a star above a bar that differs significantly from the reference)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    from matplotlib.figure import Figure

    sets = list(dict.fromkeys((r.dataset, r.split) for r in rows))
    if not sets or not metrics:
        raise ValueError("nothing to plot")
    labels = list(dict.fromkeys(r.label for r in rows))
    figure = Figure(figsize=(max(6.4, 1.1 * len(labels) + 2), 3.8 * len(sets)), dpi=110)
    width = 0.8 / len(metrics)
    for index, (dataset, split) in enumerate(sets, start=1):
        axes = figure.add_subplot(len(sets), 1, index)
        here = {r.label: r for r in rows if (r.dataset, r.split) == (dataset, split)}
        x = np.arange(len(labels))
        for m, metric in enumerate(metrics):
            heights = [here[label].values.get(metric, 0.0) * 100 if label in here else 0.0 for label in labels]
            bars = axes.bar(x + (m - (len(metrics) - 1) / 2) * width, heights, width, label=metric)
            for bar, label in zip(bars, labels, strict=True):
                test = here[label].versus_reference.get(metric) if label in here else None
                if test is not None and test.significant:
                    axes.annotate(SIGNIFICANT_MARK, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                                  ha="center", va="bottom", fontsize=9)  # fmt: skip
        names = [f"{label}\n{format_parameters(here[label].parameters) if label in here else ''}" for label in labels]
        axes.set_xticks(x, names, fontsize=8)
        axes.set_ylim(0, 118)  # room for the legend above the bars
        axes.set_ylabel("% of questions")
        axes.set_title(f"{title}: {dataset}/{split} ({SIGNIFICANT_MARK} = significantly different from {reference})",
                       fontsize=10)  # fmt: skip
        axes.legend(fontsize=8, ncols=len(metrics), loc="upper center")
        axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
