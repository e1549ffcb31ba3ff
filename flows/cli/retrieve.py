"""`odqa retrieve`: the top passages of every question of a dataset split into `runs`."""

from __future__ import annotations

import click

from .groups import (
    INDEX_TYPES,
    MODEL_HELP,
    NAME_RULE_HELP,
    RETRIEVER_CHOICES,
    checked_name,
    main,
    passages_per_question,
    workspace_arg,
)
from .numbers import FiniteRange
from .report import echo_report


@main.command("retrieve")
@click.option("--retriever", type=click.Choice(RETRIEVER_CHOICES), default="bm25", show_default=True)
@click.option("--dataset", required=True, help="Dataset whose questions are the queries.")
@click.option("--split", required=True, help="Split of the dataset, e.g. test.")
@click.option("--run", "run", required=True, callback=checked_name,
              help=f"Name of the run (replaces an earlier run of that name). {NAME_RULE_HELP}")
@click.option("--k", type=int, default=100, show_default=True, callback=passages_per_question,
              help="Passages per question (at most $ODQA_MAX_K, default 10,000).")  # fmt: skip
@click.option("--k1", type=FiniteRange(min=0), default=0.9, show_default=True, help="BM25 k1.")
@click.option("--b", type=FiniteRange(min=0, max=1), default=0.4, show_default=True, help="BM25 b.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Search threads (default: all cores).")
@click.option("--model", default=None, help=f"dense/hybrid: {MODEL_HELP}")
@click.option("--alpha", type=FiniteRange(min=0), default=None, help="hybrid: weight of BM25 (default: the tuned one).")
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True)
@click.option("--depth", type=int, default=100, show_default=True, callback=passages_per_question,
              help="hybrid: candidates taken from each side before fusing (TASER's K').")
@click.option("--trec", type=click.Path(dir_okay=False), default=None,
              help="Also write the run as a TREC file (and its run card FILE.yaml); an existing file is refused "
                   "unless --force, and one in the workspace's own folders always.")  # fmt: skip
@click.option("--force", is_flag=True, help="Replace an existing --trec file and its card.")
@click.pass_context
def retrieve(ctx: click.Context, retriever: str, dataset: str, split: str, run: str, k: int, k1: float, b: float,
             threads: int | None, model: str | None, alpha: float | None, index_type: str, depth: int,
             trec: str | None, force: bool) -> None:  # fmt: skip
    """Retrieve the top K passages for every question of DATASET/SPLIT into the runs table."""
    if retriever != "bm25" and not model:
        raise click.UsageError(f"--retriever {retriever} needs --model (a model id, HF name or folder)")
    from ..stages.retrieve import retrieve_flow

    report = retrieve_flow(dataset=dataset, split=split, run=run, retriever=retriever, k=k, model=model, alpha=alpha,
                           index_type=index_type, depth=depth, k1=k1, b=b, threads=threads, trec=trec,
                           force=force, workspace=workspace_arg(ctx))  # fmt: skip
    echo_report("retrieve", report)

