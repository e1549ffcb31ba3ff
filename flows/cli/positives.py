"""`odqa positives bm25|dense`: positives by distant supervision for answer-only questions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .groups import INDEX_TYPES, MODEL_HELP, passages_per_question, positives_group, workspace_arg
from .report import echo_report

MAX_COUNT = 10  # pipelines.retrieval.distant_positives.MAX_DERIVED_POSITIVES (not imported: --help stays quick)


def _common(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options both retrievers take: which questions, how deep, how many positives."""
    for option in reversed([
        click.option("--dataset", required=True, help="Dataset whose answer-only questions get positives."),
        click.option("--split", required=True, help="Split of the dataset, e.g. train or dev."),
        click.option("--depth", type=int, default=100, show_default=True, callback=passages_per_question,
                     help="Passages looked at per question (DPR: 100); no answer in them, no positive."),
        click.option("--count", type=click.IntRange(1, MAX_COUNT), default=1, show_default=True,
                     help="Positives kept per question (DPR: 1, the highest-ranked)."),
    ]):  # fmt: skip
        command = option(command)
    return command


def _derive(ctx: click.Context, title: str, **params: Any) -> None:
    from ..stages.positives import derive_positives_flow

    echo_report(title, derive_positives_flow(workspace=workspace_arg(ctx), **params))


@positives_group.command("bm25")
@_common
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Search threads (default: all cores).")
@click.pass_context
def positives_bm25(ctx: click.Context, dataset: str, split: str, depth: int, count: int, threads: int | None) -> None:
    """Positives from BM25 for questions without any (DPR).

    For each question without a positive of its own, the highest-ranked BM25 passages of the top
    --depth that contain an answer (DPR's has_answer), into positive_ids, marked positives_from =
    bm25, as DPR built TriviaQA, WebQuestions and CuratedTREC. Needs the BM25 index (`odqa bm25
    index`)."""
    _derive(ctx, "positives bm25", dataset=dataset, split=split, retriever="bm25", depth=depth, count=count,
            threads=threads)  # fmt: skip


@positives_group.command("dense")
@click.option("--model", required=True, help=MODEL_HELP)
@_common
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True)
@click.pass_context
def positives_dense(ctx: click.Context, model: str, dataset: str, split: str, depth: int, count: int,
                    index_type: str) -> None:  # fmt: skip
    """Positives from a dense model for questions without any.

    As `positives bm25`, ranked by MODEL (its index is built when missing); marked
    positives_from = dense:MODEL."""
    _derive(ctx, "positives dense", dataset=dataset, split=split, retriever="dense", model=model, depth=depth,
            count=count, index_type=index_type)  # fmt: skip
