"""The side-by-side comparison of `odqa reproduce`: each figure a paper reports, the same figure
of the run, and their difference (no Prefect, no workspace: the flow reads the run's figures and
hands them in)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..storage.setups import PaperFigure


@dataclass(frozen=True)
class SideBySide:
    """One paper figure and the run's."""

    retriever: str
    paper_row: str
    dataset: str
    split: str
    metric: str
    paper: float  # a fraction, as odqa stores figures
    measured: float | None  # None: the run has no such figure (a retriever or set not run)
    difference: float | None  # measured - paper
    run: str | None
    source: str

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def side_by_side(figures: Sequence[PaperFigure], runs: Mapping[tuple[str, str, str], str],
                 figure_of: Callable[[str, str, str, str], float | None]) -> list[SideBySide]:  # fmt: skip
    """Each paper figure beside the run's: `runs` maps (retriever label, dataset, split) to the run
    that retriever made on that set; `figure_of(run, dataset, split, metric)` reads its value."""
    found = []
    for f in figures:
        run = runs.get((f.retriever, f.dataset, f.split))
        measured = figure_of(run, f.dataset, f.split, f.metric) if run else None
        difference = None if measured is None else round(measured - f.fraction, 6)
        found.append(SideBySide(f.retriever, f.paper_row, f.dataset, f.split, f.metric, f.fraction, measured,
                                difference, run, f.source))  # fmt: skip
    return found


def printable(rows: Sequence[SideBySide]) -> list[dict[str, str]]:
    """The table `odqa reproduce` prints: the paper's figure, the run's, the difference, in points
    of percent for recall (R@K) and as fractions for the qrels metrics, as the papers print them."""

    def shown(value: float | None, percent: bool, signed: bool = False) -> str:
        if value is None:
            return "-"
        sign = "+" if signed else ""
        return f"{value * 100:{sign}.1f}" if percent else f"{value:{sign}.3f}"

    table = []
    for r in rows:
        percent = "R@" in r.metric
        table.append({"retriever": r.retriever, "paper row": r.paper_row, "questions": f"{r.dataset}/{r.split}",
                      "metric": r.metric, "paper": shown(r.paper, percent), "run": shown(r.measured, percent),
                      "difference": shown(r.difference, percent, signed=True)})  # fmt: skip
    return table
