"""`odqa train-rounds`: TASER's recipe (BM25 negatives, train, mine, train again; then the hybrid
weight on held-out training questions) as one resumable command (flow in flows/compositions/recipe.py).

The budget and mining options are shared with `odqa experiment` (`recipe_options`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ...models.config import CHECKPOINT_ARCHS
from ...models.settings import RetrieverSettings, TrainSettings
from .groups import (
    INDEX_TYPES,
    NAME_RULE_HELP,
    TRAINING_MODES,
    checked_name,
    main,
    parse_cutoffs,
    workspace_arg,
)
from .numbers import FiniteRange
from .settings_options import settings_from, settings_options

RECIPE_OPTIONS = [
    settings_options(RetrieverSettings, only=["base"]),
    click.option("--train", "train_sets", required=True, multiple=True, metavar="NAME:SPLIT[:WEIGHT]",
                 help="Training questions (repeatable)."),
    click.option("--evaluate", "eval_sets", required=True, multiple=True, metavar="NAME:SPLIT",
                 help="Questions every model is evaluated on (repeatable; never trained or tuned on)."),
    settings_options(TrainSettings),
    click.option("--mode", type=click.Choice(TRAINING_MODES), default="single-set", show_default=True,
                 help="Rounds after the first train on P1 u P_r (single-set) or P_r (multi-set)."),
    click.option("--bm25-negatives", type=click.IntRange(min=1, max=30), default=1, show_default=True,
                 help="BM25 hard negatives per question (P1)."),
    click.option("--mine-depth", type=click.IntRange(min=1), default=100, show_default=True,
                 help="Passages of the previous model's ranking that mining looks at."),
    click.option("--mine-count", type=click.IntRange(min=1), default=30, show_default=True,
                 help="Mined negatives kept per question."),
    click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True),
    click.option("--k", "ks", default="1,5,20,100", show_default=True, help="Cut-offs of R@K, comma-separated."),
]  # fmt: skip


def recipe_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options every recipe-based command takes (budget, data, mining)."""
    for option in reversed(RECIPE_OPTIONS):
        command = option(command)
    return command


def recipe_arguments(options: dict[str, Any]) -> dict[str, Any]:
    """Click's values of `recipe_options` as flow parameters: the `training` settings (checked
    here), the base checkpoint, data, mining and cut-offs."""
    options = dict(options)
    training = settings_from(TrainSettings, options)
    arguments = {key: options[key] for key in ("base", "mode", "bm25_negatives", "mine_depth", "mine_count",
                                                "index_type")}  # fmt: skip
    return {**arguments, "training": training, "train": list(options["train_sets"]),
            "evaluate": list(options["eval_sets"]), "ks": parse_cutoffs(options["ks"])}  # fmt: skip


def echo_scores(rows: list[dict[str, Any]]) -> None:
    """Row dicts as an aligned table, cells printed as given (0.700* stays 0.700*)."""
    from tabulate import tabulate

    if rows:
        click.echo(tabulate([list(r.values()) for r in rows], headers=list(rows[0]), tablefmt="simple",
                            disable_numparse=True))  # fmt: skip


@main.command("train-rounds")
@settings_options(RetrieverSettings, defaults={"arch": "taser"}, exclude=["base"], choices={"arch": CHECKPOINT_ARCHS})
@click.option("--model-id", required=True, callback=checked_name,
              help=f"Name of the recipe; round r's model is MODEL_ID-round<r>. {NAME_RULE_HELP}")
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True,
              help="Trainings in all: round 1 on BM25 negatives, each later one on negatives mined by the previous.")
@click.option("--holdout", type=FiniteRange(min=0, max=1, max_open=True), default=0.1, show_default=True,
              help="Fraction of the training questions held out (not trained on) to tune the hybrid weight on.")
@click.option("--hybrid/--no-hybrid", default=True, show_default=True,
              help="Tune alpha on the held-out questions and evaluate the hybrid with BM25.")
@recipe_options
@click.pass_context
def train_rounds(ctx: click.Context, model_id: str, rounds: int, holdout: float, hybrid: bool,
                 **options: Any) -> None:  # fmt: skip
    """TASER's recipe in rounds, resumable per round: BM25 negatives, train, mine with the model,
    train again; then alpha tuned on held-out training questions, and dense, hybrid and BM25
    evaluated. Each round's figures are printed and stored in `metrics`."""
    from ...storage.experiments import RECIPE
    from ..compositions.recipe import train_rounds_flow

    arguments = recipe_arguments(options)
    retriever = settings_from(RetrieverSettings, {**options, "base": arguments.pop("base")})
    report = train_rounds_flow(retriever=retriever, model_id=model_id, rounds=rounds, holdout=holdout, hybrid=hybrid,
                               workspace=workspace_arg(ctx), **arguments)  # fmt: skip
    click.echo("\n".join(report.headline(model_id)))
    echo_scores([{"retriever": s.retriever, "questions": f"{s.dataset}/{s.split}", "run": s.run,
                  **{m: f"{v:.3f}" for m, v in s.recall.items()}} for s in report.final])  # fmt: skip
    click.echo(f"every round's figures: odqa sql \"SELECT * FROM metrics WHERE run = '{RECIPE}:{model_id}'\"")
