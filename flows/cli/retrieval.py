"""`odqa bm25 index`, `odqa retrieve`, `odqa import run`, `odqa negatives bm25`."""

from __future__ import annotations

import click

from flows.cli.groups import import_group, main, workspace_arg
from flows.cli.report import echo_report

# The names `flows.retrieval.RETRIEVERS` knows; listed here so `--help` needs no flow imports.
RETRIEVER_CHOICES = ["bm25", "dense", "hybrid"]


@main.group("bm25")
def bm25_group() -> None:
    """The Lucene BM25 index of the passages (pyserini; needs a JDK 21+)."""


@bm25_group.command("index")
@click.option("--threads", type=int, default=None, help="Indexing threads (default: all cores).")
@click.pass_context
def bm25_index(ctx: click.Context, threads: int | None) -> None:
    """Index every passage (title + text) with positions, doc vectors and raw text stored."""
    from flows.retrieval import bm25_index_flow

    echo_report("bm25 index", bm25_index_flow(workspace=workspace_arg(ctx), threads=threads))


@main.command("retrieve")
@click.option("--retriever", type=click.Choice(RETRIEVER_CHOICES), default="bm25", show_default=True)
@click.option("--dataset", required=True, help="Dataset whose questions are the queries.")
@click.option("--split", required=True, help="Split of the dataset, e.g. test.")
@click.option("--run", "run", required=True, help="Name of the run (replaces an earlier run of that name).")
@click.option("--k", type=int, default=100, show_default=True, help="Passages per question.")
@click.option("--k1", type=float, default=0.9, show_default=True, help="BM25 k1.")
@click.option("--b", type=float, default=0.4, show_default=True, help="BM25 b.")
@click.option("--threads", type=int, default=None, help="Search threads (default: all cores).")
@click.option("--model", default=None, help="dense/hybrid: model id from `models`, or a HF name or folder.")
@click.option("--alpha", type=float, default=None, help="hybrid: weight of BM25 (default: the tuned one).")
@click.option("--index-type", type=click.Choice(["flat", "hnsw", "ivfpq"]), default="flat", show_default=True)
@click.option(
    "--trec", type=click.Path(dir_okay=False), default=None, help="Also write the run as a TREC file."
)
@click.pass_context
def retrieve(ctx: click.Context, retriever: str, dataset: str, split: str, run: str, k: int, k1: float, b: float,
             threads: int | None, model: str | None, alpha: float | None, index_type: str,
             trec: str | None) -> None:  # fmt: skip
    """Retrieve the top K passages for every question of DATASET/SPLIT into the runs table."""
    if retriever == "bm25":
        from flows.retrieval import retrieve_flow

        report = retrieve_flow(dataset=dataset, split=split, run=run, retriever=retriever, k=k, k1=k1, b=b,
                               threads=threads, trec=trec, workspace=workspace_arg(ctx))  # fmt: skip
    else:
        if not model:
            raise click.UsageError(f"--retriever {retriever} needs --model (a model id, HF name or folder)")
        from flows.dense import dense_retrieve_flow

        report = dense_retrieve_flow(dataset=dataset, split=split, run=run, model=model, retriever=retriever, k=k,
                                     alpha=alpha, index_type=index_type, trec=trec,
                                     workspace=workspace_arg(ctx))  # fmt: skip
    echo_report("retrieve", report)


@import_group.command("run")
@click.option("--format", "fmt", type=click.Choice(["trec"]), default="trec", show_default=True)
@click.option("--run", "run", required=True, help="Name to store the run under.")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.pass_context
def import_run(ctx: click.Context, fmt: str, run: str, path: str) -> None:
    """Import a run file (`qid Q0 docid rank score tag`); ranks are re-derived from scores."""
    from flows.retrieval import import_run_flow

    echo_report("import run", import_run_flow(path=path, run=run, fmt=fmt, workspace=workspace_arg(ctx)))


@main.group("negatives")
def negatives_group() -> None:
    """Hard negatives for training, written to questions.hard_negative_ids."""


@negatives_group.command("bm25")
@click.option("--dataset", required=True)
@click.option("--split", required=True)
@click.option("--count", type=click.IntRange(1, 30), default=1, show_default=True,
              help="Negatives per question (DPR: 1).")  # fmt: skip
@click.option(
    "--depth", type=int, default=100, show_default=True, help="BM25 passages considered per question."
)
@click.option("--threads", type=int, default=None, help="Search threads (default: all cores).")
@click.pass_context
def negatives_bm25(
    ctx: click.Context, dataset: str, split: str, count: int, depth: int, threads: int | None
) -> None:
    """Top BM25 passages that contain no answer and are not positives (DPR's recipe)."""
    from flows.retrieval import bm25_negatives_flow

    report = bm25_negatives_flow(dataset=dataset, split=split, count=count, depth=depth, threads=threads,
                                 workspace=workspace_arg(ctx))  # fmt: skip
    echo_report("negatives bm25", report)
