"""`odqa experiment dual-encoders` and `odqa experiment taser`: the papers' comparisons in one
command each (flows in flows/compositions/experiments.py), over any question sets the workspace holds."""

from __future__ import annotations

from typing import Any

import click

from ...models.config import CHECKPOINT_ARCHS
from ...models.settings import RetrieverSettings
from .groups import SIGNIFICANCE, main, workspace_arg
from .numbers import FiniteRange
from .recipe import echo_scores, recipe_arguments, recipe_options
from .settings_options import settings_options

ALPHA_HELP = "Significance level after Bonferroni correction."


@main.group("experiment")
def experiment_group() -> None:
    """The papers' comparisons: train, evaluate and test the retrievers side by side."""


def _archs(value: str) -> list[str]:
    archs = [a.strip() for a in value.split(",") if a.strip()]
    unknown = sorted(set(archs) - set(CHECKPOINT_ARCHS))
    if unknown or not archs:
        raise click.BadParameter(f"unknown arch(s) {unknown}; choose from {', '.join(CHECKPOINT_ARCHS)}")
    return archs


def _with_budget(options: dict[str, Any]) -> dict[str, Any]:
    """The recipe options as an experiment's parameters: data and cut-offs, and the Budget."""
    from ..compositions.experiments import Budget

    arguments = recipe_arguments(options)
    fields = set(Budget.model_fields)
    return {**{k: v for k, v in arguments.items() if k not in fields},
            "budget": Budget(**{k: v for k, v in arguments.items() if k in fields})}  # fmt: skip


def _echo(report: Any) -> None:
    """The experiment's table, its tests against the reference, parameter ratios, plot and SQL."""
    from ...storage.experiments import experiment_stage

    click.echo(f"experiment {report.name}: {report.title} (* = significantly different from {report.reference}, "
               "paired two-sided t-test, Bonferroni-corrected)")  # fmt: skip
    echo_scores(report.table())
    if report.significance():
        click.echo(f"\ntests against {report.reference}:")
        echo_scores(report.significance())
    click.echo("\nparameter ratios: " + ", ".join(f"{k} {v:.3f}" for k, v in report.parameter_ratios.items()))
    searched, reused = report.bm25_searches()
    click.echo(f"BM25 negatives: {searched} questions searched, {reused} reused across the {len(report.recipes)} "
               "retrievers (the same training questions)")  # fmt: skip
    click.echo(f"plot: {report.plot}")
    for plot in report.recall_plots:
        click.echo(f"R@K curves: {plot}")
    click.echo(f"in SQL: odqa sql \"SELECT * FROM metrics WHERE run = '{experiment_stage(report.name)}'\"")


@experiment_group.command("dual-encoders")
@click.option("--archs", default="sde,ade,ade-ste,ade-fte,ade-spl,taser", show_default=True,
              help="Architectures to compare, comma-separated.")  # fmt: skip
@click.option("--reference", type=click.Choice(CHECKPOINT_ARCHS), default="sde", show_default=True,
              help="The arch every other one is tested against.")
@click.option("--name", default="dual-encoders", show_default=True,
              help="Experiment name (models are NAME-<arch>-round<r>; metrics run experiment:NAME).")
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True,
              help="Training rounds per model (2+: mine with the previous round's model).")
@click.option("--alpha", type=SIGNIFICANCE, default=0.05, show_default=True, help=ALPHA_HELP)
@recipe_options
@click.pass_context
def dual_encoders(ctx: click.Context, archs: str, reference: str, name: str, rounds: int, alpha: float,
                  **options: Any) -> None:  # fmt: skip
    """SDE, ADE, ADE-STE, ADE-FTE, ADE-SPL and TASER from one base with one budget, side by side."""
    from ..compositions.experiments import dual_encoders_experiment_flow

    chosen = _archs(archs)
    if reference not in chosen:
        raise click.BadParameter(f"{reference!r} is not one of --archs {chosen}", param_hint="--reference")
    report = dual_encoders_experiment_flow(archs=chosen, reference=reference, name=name, rounds=rounds, alpha=alpha,
                                           workspace=workspace_arg(ctx), **_with_budget(options))  # fmt: skip
    _echo(report)


@experiment_group.command("taser")
@click.option("--name", default="taser", show_default=True,
              help="Experiment name (models are NAME-dpr-round<r>, NAME-taser-round<r>; metrics run experiment:NAME).")
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True,
              help="Training rounds per model (TASER App. B: 2).")
@settings_options(RetrieverSettings, only=["routing"])
@click.option("--holdout", type=FiniteRange(min=0, max=1, min_open=True, max_open=True), default=0.1,
              show_default=True, help="Fraction of the training questions held out to tune the hybrid weight on.")
@click.option("--hybrid/--no-hybrid", default=True, show_default=True,
              help="Also tune and evaluate each dense model's hybrid with BM25 (--no-hybrid: no hold-out either).")
@click.option("--alpha", type=SIGNIFICANCE, default=0.05, show_default=True, help=ALPHA_HELP)
@recipe_options
@click.pass_context
def taser(ctx: click.Context, name: str, rounds: int, routing: str, holdout: float, hybrid: bool, alpha: float,
          **options: Any) -> None:  # fmt: skip
    """TASER vs DPR (same recipe and budget) vs BM25 vs their hybrids with BM25, with the
    parameter ratio TASER/DPR."""
    from ..compositions.experiments import taser_experiment_flow

    report = taser_experiment_flow(name=name, rounds=rounds, routing=routing, holdout=holdout, hybrid=hybrid,
                                   alpha=alpha, workspace=workspace_arg(ctx), **_with_budget(options))  # fmt: skip
    _echo(report)
