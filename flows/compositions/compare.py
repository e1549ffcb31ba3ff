"""`odqa compare`: runs side by side, with paired significance tests.

Per shared dataset split and metric: each run's mean and two-sided paired t-tests between every
pair of runs, Bonferroni-corrected (`pipelines.evaluation.metrics.compare_runs`), plus one R@K
plot of all runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect import flow

from ...pipelines.evaluation.metrics import DEFAULT_KS, compare_runs
from ...storage import Workspace
from ...storage.choices import RunPassages
from ...storage.reports import Report
from ..plumbing.bounds import AtLeastOne, Share
from ..stages.evaluate import recall_plot, score_run, scoring_passages


@dataclass
class CompareReport(Report):
    runs: list[str]
    alpha: float
    means: list[dict[str, Any]]  # dataset, split, run, metric, value
    comparisons: list[dict[str, Any]]  # dataset, split, metric, run_a, run_b, means, p values, significant
    plot: str | None


@flow(name="compare")
def compare_flow(runs: list[str], ks: list[AtLeastOne] | None = None, match: str = "auto", alpha: Share = 0.05,
                 passages: RunPassages = "run", workspace: str | None = None) -> CompareReport:  # fmt: skip
    """Paired two-sided t-tests (Bonferroni-corrected) between runs on the splits they share,
    each run's answers matched in `passages` (as `odqa evaluate --passages`)."""
    if len(runs) < 2 or len(set(runs)) != len(runs):
        raise ValueError(f"compare needs at least two distinct runs, got {runs}")
    ks = sorted(set(ks or DEFAULT_KS))
    ws = Workspace.resolve(workspace)
    scored = {run: {(s.dataset, s.split): s for s in score_run(ws, run, tuple(ks), match,
                                                                scoring_passages(ws, run, passages))}
              for run in runs}  # fmt: skip
    shared = sorted(set.intersection(*(set(by_split) for by_split in scored.values())))
    if not shared:
        raise ValueError(f"runs {runs} share no dataset split to compare on")
    comparisons, means = [], []
    for dataset, split in shared:
        table = compare_runs({run: scored[run][dataset, split].per_question for run in runs}, alpha=alpha)
        comparisons += [{"dataset": dataset, "split": split, **row} for row in table.to_pylist()]
        means += [{"dataset": dataset, "split": split, "run": run, "metric": v.metric, "value": v.value}
                  for run in runs for v in scored[run][dataset, split].values if v.group == ""]  # fmt: skip
    plot = recall_plot(ws, "compare-" + "-vs-".join(runs), "Top-K retrieval accuracy: " + " vs ".join(runs),
                       [(run, scored[run][pair]) for pair in shared for run in runs])  # fmt: skip
    return CompareReport(runs=runs, alpha=alpha, means=means, comparisons=comparisons, plot=plot)
