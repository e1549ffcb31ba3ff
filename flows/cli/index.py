"""`odqa index build|plan`: FAISS indexes of a model's passage embeddings, and what they cost."""

from __future__ import annotations

import click

from .groups import INDEX_TYPES, MODEL_HELP, index_group, workspace_arg
from .numbers import FiniteRange
from .report import echo_report
from .runner_options import runner_options, runner_settings


@index_group.command("build")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option("--type", "index_type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True,
              help="flat: exact inner product; hnsw: graph (DPR's IP->L2 transform); ivfpq: compressed.")  # fmt: skip
@click.option("--hnsw-m", type=click.IntRange(min=4), default=None, help="HNSW links per node (default 64).")
@click.option("--nlist", type=click.IntRange(min=1), default=None, help="IVF cells (default ~4 sqrt(n)).")
@click.option("--pq-m", type=click.IntRange(min=1), default=None, help="PQ sub-quantizers (default dim/8).")
@click.option("--shards-per-part", type=click.IntRange(min=1), default=None,
              help="Split the index into parts of this many embedding shards (searched with a top-k merge).")  # fmt: skip
@click.option("--memory-gb", type=FiniteRange(min=0, min_open=True), default=None,
              help="Memory budget of the build: parts sized to fit it, refused when none can (see `index plan`).")
@runner_options
@click.pass_context
def index_build(ctx: click.Context, model: str, index_type: str, hnsw_m: int | None, nlist: int | None,
                pq_m: int | None, shards_per_part: int | None, memory_gb: float | None, runner: str | None,
                runner_workers: int | None, dask_address: str | None) -> None:  # fmt: skip
    """Build the index (encoding the passages first when their embeddings are missing or stale;
    the runner options apply to that encoding). The build plan is logged first. The model is added
    to the published release; its default model stays (`odqa release pin --model M` changes it)."""
    from ..stages.index import index_build_flow

    report = index_build_flow(model=model, index_type=index_type, workspace=workspace_arg(ctx), hnsw_m=hnsw_m,
                              nlist=nlist, pq_m=pq_m, shards_per_part=shards_per_part, memory_gb=memory_gb,
                              runner=runner_settings(runner, runner_workers, dask_address))  # fmt: skip
    echo_report("index build", report)


@index_group.command("plan")
@click.option("--passages", type=click.IntRange(min=1), required=True, help="Vectors to index.")
@click.option("--dim", type=click.IntRange(min=1), required=True, help="Embedding dimension.")
@click.option("--type", "index_type", type=click.Choice(INDEX_TYPES), default=None,
              help="One index type (default: all three).")  # fmt: skip
@click.option("--memory-gb", type=FiniteRange(min=0, min_open=True), default=None,
              help="Memory budget: parts sized to fit it, or refused.")
@click.option("--hnsw-m", type=click.IntRange(min=4), default=None, help="HNSW links per node (default 64).")
@click.option("--nlist", type=click.IntRange(min=1), default=None, help="IVF cells (default ~4 sqrt(n)).")
@click.option("--pq-m", type=click.IntRange(min=1), default=None, help="PQ sub-quantizers (default dim/8).")
def index_plan(passages: int, dim: int, index_type: str | None, memory_gb: float | None, hnsw_m: int | None,
               nlist: int | None, pq_m: int | None) -> None:  # fmt: skip
    """Print the RAM, disk and build time each index type needs on this machine.

    From per-vector costs measured here once (a few seconds; cached in ~/.cache/odqa or
    $ODQA_INDEX_COSTS). Exits with status 2 when the chosen type does not fit --memory-gb."""
    from ...pipelines.dense.faiss_index import IndexParams
    from ...pipelines.dense.index_planner import default_cache, describe, load_or_calibrate, plan_all

    params = IndexParams(hnsw_m=hnsw_m or IndexParams().hnsw_m, nlist=nlist, pq_m=pq_m)
    costs = load_or_calibrate(default_cache(), dim, params.hnsw_m, params.ef_construction)
    plans = plan_all(costs, passages, memory_gb, params, (index_type,) if index_type else tuple(INDEX_TYPES))
    click.echo(describe(plans, memory_gb, costs))
    if index_type and plans[0].refused:
        raise SystemExit(2)

