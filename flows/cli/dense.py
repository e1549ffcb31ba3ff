"""`odqa encode`, `odqa index build`, `odqa tune-hybrid`, `odqa search`, `odqa mine`,
`odqa plot embeddings`: the dense retrieval verbs (flows in `flows/dense.py`)."""

from __future__ import annotations

import click

from flows.cli.groups import main, prefect_api_of, workspace_arg
from flows.cli.report import echo_report
from flows.cli.runner_options import runner_options, runner_settings

MODEL_HELP = "Model id of the models table, or a Hugging Face name / model folder."
INDEX_TYPES = ["flat", "hnsw", "ivfpq"]


@main.command("encode")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option("--shard-size", type=click.IntRange(min=1), default=50_000, show_default=True,
              help="Passages per shard (the unit of resuming).")  # fmt: skip
@click.option("--batch-size", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True,
              help="Stored vector type.")  # fmt: skip
@click.option("--precision", type=click.Choice(["auto", "fp32", "bf16", "fp16"]), default="auto", show_default=True,
              help="Compute precision (auto: bf16/fp16 on GPU, fp32 on CPU).")  # fmt: skip
@runner_options
@click.pass_context
def encode(ctx: click.Context, model: str, shard_size: int, batch_size: int, dtype: str, precision: str,
           runner: str | None, runner_workers: int | None, dask_address: str | None) -> None:  # fmt: skip
    """Encode every passage with MODEL's passage encoder (resumable; a no-op when current).

    By default one process encodes (one per GPU when there are several); `--runner` /
    `--dask-address` map one task per shard over a Prefect task runner instead."""
    from flows.dense import encode_flow

    report = encode_flow(model=model, workspace=workspace_arg(ctx), shard_size=shard_size, batch_size=batch_size,
                         dtype=dtype, precision=precision,
                         runner=runner_settings(runner, runner_workers, dask_address))  # fmt: skip
    echo_report("encode", report)


@main.group("index")
def index_group() -> None:
    """FAISS indexes of a model's passage embeddings."""


@index_group.command("build")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option("--type", "index_type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True,
              help="flat: exact inner product; hnsw: graph (DPR's IP->L2 transform); ivfpq: compressed.")  # fmt: skip
@click.option("--hnsw-m", type=click.IntRange(min=4), default=None, help="HNSW links per node (default 64).")
@click.option("--nlist", type=click.IntRange(min=1), default=None, help="IVF cells (default ~4 sqrt(n)).")
@click.option("--pq-m", type=click.IntRange(min=1), default=None, help="PQ sub-quantizers (default dim/8).")
@click.option("--shards-per-part", type=click.IntRange(min=1), default=None,
              help="Split the index into parts of this many embedding shards (searched with a top-k merge).")  # fmt: skip
@click.option("--memory-gb", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Memory budget of the build: parts sized to fit it, refused when none can (see `index plan`).")
@runner_options
@click.pass_context
def index_build(ctx: click.Context, model: str, index_type: str, hnsw_m: int | None, nlist: int | None,
                pq_m: int | None, shards_per_part: int | None, memory_gb: float | None, runner: str | None,
                runner_workers: int | None, dask_address: str | None) -> None:  # fmt: skip
    """Build the index (encoding the passages first when their embeddings are missing or stale;
    the runner options apply to that encoding). The build plan is logged first."""
    from flows.dense import index_build_flow

    report = index_build_flow(model=model, index_type=index_type, workspace=workspace_arg(ctx), hnsw_m=hnsw_m,
                              nlist=nlist, pq_m=pq_m, shards_per_part=shards_per_part, memory_gb=memory_gb,
                              runner=runner_settings(runner, runner_workers, dask_address))  # fmt: skip
    echo_report("index build", report)


@index_group.command("plan")
@click.option("--passages", type=click.IntRange(min=1), required=True, help="Vectors to index.")
@click.option("--dim", type=click.IntRange(min=1), required=True, help="Embedding dimension.")
@click.option("--type", "index_type", type=click.Choice(INDEX_TYPES), default=None,
              help="One index type (default: all three).")  # fmt: skip
@click.option("--memory-gb", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Memory budget: parts sized to fit it, or refused.")
@click.option("--hnsw-m", type=click.IntRange(min=4), default=None, help="HNSW links per node (default 64).")
@click.option("--nlist", type=click.IntRange(min=1), default=None, help="IVF cells (default ~4 sqrt(n)).")
@click.option("--pq-m", type=click.IntRange(min=1), default=None, help="PQ sub-quantizers (default dim/8).")
def index_plan(passages: int, dim: int, index_type: str | None, memory_gb: float | None, hnsw_m: int | None,
               nlist: int | None, pq_m: int | None) -> None:  # fmt: skip
    """Print the RAM, disk and build time each index type needs on this machine.

    From per-vector costs measured here once (a few seconds; cached in ~/.cache/odqa or
    $ODQA_INDEX_COSTS). Exits with status 2 when the chosen type does not fit --memory-gb."""
    from pipelines.dense.faiss_index import IndexParams
    from pipelines.dense.index_planner import default_cache, describe, load_or_calibrate, plan_all

    params = IndexParams(hnsw_m=hnsw_m or IndexParams().hnsw_m, nlist=nlist, pq_m=pq_m)
    costs = load_or_calibrate(default_cache(), dim, params.hnsw_m, params.ef_construction)
    plans = plan_all(costs, passages, memory_gb, params, (index_type,) if index_type else tuple(INDEX_TYPES))
    click.echo(describe(plans, memory_gb, costs))
    if index_type and plans[0].refused:
        raise SystemExit(2)


@main.command("tune-hybrid")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option("--dev", multiple=True, required=True, metavar="NAME:SPLIT",
              help="Dev questions (repeatable; TASER tunes one alpha on the combined dev sets).")  # fmt: skip
@click.option("--k", type=click.IntRange(min=1), default=20, show_default=True, help="Select alpha by R@k.")
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True)
@click.pass_context
def tune_hybrid(ctx: click.Context, model: str, dev: tuple[str, ...], k: int, index_type: str) -> None:
    """Pick the hybrid weight alpha in 0.5..2.0 (step 0.1) with the best dev R@k and store it."""
    from flows.dense import tune_hybrid_flow

    report = tune_hybrid_flow(model=model, dev=list(dev), k=k, index_type=index_type, workspace=workspace_arg(ctx))
    echo_report("tune-hybrid", report)


@main.command("search")
@click.argument("questions", nargs=-1)
@click.option("--retriever", type=click.Choice(["bm25", "dense", "hybrid"]), default=None,
              help="Default: dense when --model is given, else bm25.")  # fmt: skip
@click.option("--model", default=None, help=MODEL_HELP)
@click.option("--k", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--alpha", type=float, default=None, help="Hybrid weight (default: the tuned one).")
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True)
@click.pass_context
def search(ctx: click.Context, questions: tuple[str, ...], retriever: str | None, model: str | None, k: int,
           alpha: float | None, index_type: str) -> None:  # fmt: skip
    """Print the top passages (title, score, text) for each QUESTION (or each line of stdin).

    With a Prefect server configured the search is a flow run on it; without one it is answered
    directly, without starting a temporary server (searching writes nothing to track)."""
    from flows.dense import search_flow

    asked = list(questions) or [line.strip() for line in click.get_text_stream("stdin") if line.strip()]
    if not asked:
        raise click.UsageError("give a question (or pipe questions on stdin, one per line)")
    run = search_flow if prefect_api_of(ctx).url else search_flow.fn
    results = run(questions=asked, retriever=retriever or ("dense" if model else "bm25"), model=model, k=k,
                  alpha=alpha, index_type=index_type, workspace=workspace_arg(ctx))  # fmt: skip
    current = None
    for row in results:
        if row["question"] != current:
            current = row["question"]
            click.echo(f"\n? {current}")
        text = (row["text"] or "").replace("\n", " ")
        click.echo(f"{row['rank']:>3}. [{row['score']:.3f}] {row['title']} ({row['passage_id']})")
        click.echo(f"     {text[:240]}{'...' if len(text) > 240 else ''}")


@main.command("mine")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option("--dataset", required=True)
@click.option("--split", required=True)
@click.option("--mode", type=click.Choice(["single-set", "multi-set"]), default="single-set", show_default=True,
              help="single-set: new negatives = BM25 P1 u mined P2; multi-set: P2 only (TASER).")  # fmt: skip
@click.option("--depth", type=click.IntRange(min=1), default=100, show_default=True, help="Passages retrieved.")
@click.option("--count", type=click.IntRange(min=1), default=30, show_default=True, help="Mined negatives kept.")
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True)
@click.option("--question-batch", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Questions per mining task on a task runner.")  # fmt: skip
@runner_options
@click.pass_context
def mine(ctx: click.Context, model: str, dataset: str, split: str, mode: str, depth: int, count: int,
         index_type: str, question_batch: int, runner: str | None, runner_workers: int | None,
         dask_address: str | None) -> None:  # fmt: skip
    """Hard negatives from MODEL's top passages (no gold, no answer-bearing) into hard_negative_ids."""
    from flows.dense import mine_flow

    report = mine_flow(model=model, dataset=dataset, split=split, mode=mode, depth=depth, count=count,
                       index_type=index_type, workspace=workspace_arg(ctx), question_batch=question_batch,
                       runner=runner_settings(runner, runner_workers, dask_address))  # fmt: skip
    echo_report("mine", report)


@main.group("plot")
def plot_group() -> None:
    """Plots written to <workspace>/plots."""


@plot_group.command("embeddings")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option("--dataset", default=None, help="Questions of this dataset (default: all).")
@click.option("--split", default=None)
@click.option("--samples", type=click.IntRange(min=5), default=500, show_default=True,
              help="Questions and passages each.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True)
@click.pass_context
def plot_embeddings(ctx: click.Context, model: str, dataset: str | None, split: str | None, samples: int,
                    seed: int) -> None:  # fmt: skip
    """t-SNE of question vs passage embeddings: do the two towers share one space?"""
    from flows.dense import plot_embeddings_flow

    report = plot_embeddings_flow(model=model, dataset=dataset, split=split, samples=samples, seed=seed,
                                  workspace=workspace_arg(ctx))  # fmt: skip
    echo_report("plot embeddings", report)
