"""`odqa index build`: a FAISS index of a model's passage embeddings, then published.

The embeddings are encoded first when they are missing or stale (`flows.stages.encode`). The build plan
(RAM, disk, time; `pipelines.dense.index_planner`) is logged before every build; with a memory
budget the index is split into parts that each fit it, or the build is refused. Verbs that search
with a model and build what they need (retrieve, tune-hybrid, mine, QSFT) pass `ensure_dense_index`
to `models.searchers.open_searcher`: it builds a missing or stale index the way this verb would
and says so on the terminal. The model is resolved once, where the flow starts; the tasks get the
resolved `ModelRef`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prefect import flow, task

from ...models.searchers import EncoderCache
from ...models.searchers.dense import dense_build, dense_index_problem
from ...pipelines.dense.faiss_index import (
    IndexParams,
    applicable_params,
    build_faiss_index,
    read_index_metadata,
)
from ...pipelines.dense.index_planner import plan_embeddings
from ...pipelines.dense.sharded_encoding import DEFAULT_SHARD_SIZE
from ...storage import Workspace
from ...storage.choices import INDEX_TYPES, IndexType, Precision
from ...storage.model_registry import ModelRef, resolve_model
from ...storage.releases import ServingChange
from ...storage.reports import Report
from ..plumbing.bounds import AtLeastOne, HnswLinks, Positive
from ..plumbing.console import tell
from ..plumbing.publish import publish_indexes
from ..plumbing.report_text import log_report
from ..plumbing.runtime import flow_run_logs, stage_logger
from ..plumbing.task_runners import RunnerSettings
from .encode import encode, encode_task, stored_dtype


@dataclass
class IndexBuildReport(Report):
    model: str
    index: str
    type: str
    vectors: int
    parts: int
    params: dict[str, Any]
    release: str | None = None


def index_params(index_type: IndexType, hnsw_m: int | None = None, nlist: int | None = None, pq_m: int | None = None,
                 shards_per_part: int | None = None) -> IndexParams:  # fmt: skip
    if index_type not in INDEX_TYPES:
        raise ValueError(f"index type must be one of {INDEX_TYPES}, got {index_type!r}")
    defaults = IndexParams()
    return IndexParams(hnsw_m=hnsw_m or defaults.hnsw_m, nlist=nlist, pq_m=pq_m, shards_per_part=shards_per_part)


def planned_build(embeddings: Path, target: Path, index_type: IndexType, params: IndexParams | None,
                  memory_gb: float | None) -> Any:  # fmt: skip
    """Plan the build (logged, refused when the memory budget cannot hold it), then build with the
    plan's parameters (parts sized to the budget). Returns the index metadata."""
    plan, text = plan_embeddings(embeddings, index_type, params, memory_gb)
    stage_logger().info("%s", text)
    return build_faiss_index(embeddings, target, index_type=index_type, params=plan.params)


@task(name="dense-index-build")
def index_task(workspace: str, ref: ModelRef, index_type: IndexType, params: dict[str, Any],
               memory_gb: float | None = None, passages_version: str | None = None) -> IndexBuildReport:  # fmt: skip
    """The model's FAISS index of its embeddings of `passages_version` (default: the current passages)."""
    ws = Workspace.resolve(workspace)
    build = dense_build(ws, ref, passages_version)
    folder = build.index(index_type)
    before = read_index_metadata(folder)
    meta = planned_build(build.embeddings, folder, index_type, IndexParams(**params), memory_gb)
    return IndexBuildReport(model=ref.name, index=str(folder), type=index_type, vectors=meta.num_vectors,
                            parts=len(meta.parts), params=applicable_params(index_type, meta.params),
                            noop=before is not None and before.to_json() == meta.to_json())  # fmt: skip


def build_dense_index(ws: Workspace, ref: ModelRef, index_type: IndexType, params: IndexParams, *, batch_size: int = 128,
                      precision: Precision = "auto", runner: RunnerSettings | None = None,
                      memory_gb: float | None = None) -> IndexBuildReport:  # fmt: skip
    """Encode (when needed), build, publish: what `odqa index build` does, inside any flow."""
    with flow_run_logs():
        encoded = encode(ws, ref, DEFAULT_SHARD_SIZE, batch_size, None, precision, runner)
        report = index_task(str(ws.root), ref, index_type, asdict(params), memory_gb)
    report.noop = report.noop and encoded.noop
    report.release = publish_indexes(ws, dense_build(ws, ref).passages_version,
                                     change=ServingChange(add_models=(ref.passage_key,))).current  # fmt: skip
    return report


@flow(name="dense-index-build")
def index_build_flow(
    model: str,
    index_type: IndexType = "flat",
    workspace: str | None = None,
    hnsw_m: HnswLinks | None = None,
    nlist: AtLeastOne | None = None,
    pq_m: AtLeastOne | None = None,
    shards_per_part: AtLeastOne | None = None,
    batch_size: AtLeastOne = 128,
    precision: Precision = "auto",
    runner: RunnerSettings | None = None,
    memory_gb: Positive | None = None,
) -> IndexBuildReport:
    """Build a FAISS index of the model's passage embeddings (encoding them first if needed, on
    the runner if one is given: see `encode_flow`) and publish it to running searchers, beside
    what the release serves (its default model stays the default). The
    build plan (RAM, disk, time) is logged first; with `memory_gb` the index is split into parts
    that each fit the budget, or the build is refused when none can.

    Args:
        model: Model id, Hugging Face name or folder whose passage embeddings are indexed.
        index_type: flat (exact inner product), hnsw (graph) or ivfpq (compressed).
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        hnsw_m: hnsw: links per node; empty: 64.
        nlist: ivfpq: IVF cells; empty: about 4 sqrt(passages).
        pq_m: ivfpq: PQ sub-quantizers; empty: dimension / 8.
        shards_per_part: Split the index into parts of this many embedding shards (searched with a
            top-k merge); empty: one part.
        batch_size: Passages per encoding batch.
        precision: Encoding precision: auto (bf16/fp16 on GPU, fp32 on CPU), fp32, bf16 or fp16.
        runner: Encode shards as tasks on this task runner (threads, processes or a Dask cluster);
            empty: in process.
        memory_gb: Memory budget of the build in GB: parts sized to fit it, refused when none can;
            empty: no limit.
    """
    ws = Workspace.resolve(workspace)
    params = index_params(index_type, hnsw_m, nlist, pq_m, shards_per_part)
    report = build_dense_index(ws, resolve_model(ws, model), index_type, params, batch_size=batch_size, precision=precision,
                               runner=runner, memory_gb=memory_gb)  # fmt: skip
    log_report(f"index build {model}", report)
    return report


def ensure_dense_index(ws: Workspace, ref: ModelRef, index_type: IndexType, encoders: EncoderCache) -> None:
    """Build the model's index when it is missing or stale, as `odqa index build` would (default
    parameters), saying so on the terminal (a `models.searchers.IndexBuilder`). Inside a flow run
    its tasks show in the UI; outside one they run directly."""
    from prefect.context import FlowRunContext

    problem = dense_index_problem(ws, ref, index_type, encoders)
    if problem is None:
        return
    passage = ref.passage_side()
    tell("%s; building it (as odqa index build --model %s --type %s would) ...", problem, passage.name, index_type)
    if FlowRunContext.get() is not None:
        build_dense_index(ws, passage, index_type, index_params(index_type))
        return
    encode_task.fn(str(ws.root), passage, DEFAULT_SHARD_SIZE, 128, stored_dtype(ws, passage, None), "auto")
    index_task.fn(str(ws.root), passage, index_type, asdict(index_params(index_type)))
    publish_indexes(ws, dense_build(ws, passage).passages_version, change=ServingChange(add_models=(passage.passage_key,)))
