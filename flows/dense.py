"""Prefect flows for dense retrieval: encode, index, retrieve (dense / hybrid), tune the hybrid
weight, search, mine hard negatives, query-side fine-tuning and the t-SNE probe. (Training in
rounds with mined negatives, TASER's recipe, is flows/recipe.py.)

Where things live: ``<workspace>/indexes/dense/<model key>/`` holds ``embeddings/`` (the
sharded corpus vectors with their manifest), one folder per index type (``flat``, ``hnsw``,
``ivfpq``) and ``hybrid.json`` (the tuned alpha). The model key is the model id for models of
this workspace, else a slug of the Hugging Face name or folder.

``--model`` everywhere is a model id of the ``models`` table (``<workspace>/models/<id>``) or a
Hugging Face name / local folder. A query-side fine-tuned model carries ``qsft.json`` naming its
passage-side model: its passages, embeddings and index are those of that model, because QSFT
keeps the passage encoder and the index fixed.

The corpus fingerprint is the version of the ``passages`` table, so re-ingesting passages makes
old embeddings and indexes stale (re-encoded / refused), while re-running with unchanged inputs
is a no-op.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from prefect import flow, task

from flows.runtime import flow_run_logs, stage_logger
from flows.task_runners import RunnerSettings, mapping_runner
from pipelines.progress import progress
from storage import Workspace
from storage.fingerprint import file_sha256, fingerprint

DENSE_DIR = "dense"
EMBEDDINGS = "embeddings"
HYBRID_FILE = "hybrid.json"
QSFT_FILE = "qsft.json"
PASSAGE_COLUMNS = ["passage_id", "title", "text"]
QUESTION_CHUNK = 1024  # questions encoded and searched per step of a run


# --- models and folders ---------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRef:
    """A resolved ``--model``: where to load it from, its folder key, and its passage side."""

    name: str  # as given
    path: str  # folder or Hugging Face name for load_retriever
    key: str  # folder name under indexes/dense
    passage_name: str  # the model whose passage encoder made the index (itself unless QSFT)
    passage_path: str
    passage_key: str


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "model"


def _resolve_one(ws: Workspace, model: str) -> tuple[str, str]:
    """(path for load_retriever, folder key) of a model id, folder or Hugging Face name."""
    registered = ws.models_dir / model
    if "/" not in model and (registered / "config.json").is_file():
        return str(registered), _slug(model)
    rows = ws.read_table("models", columns=["model_id", "path"], filter=pc.field("model_id") == model)
    if rows.num_rows:
        path = rows.column("path")[0].as_py()
        if not Path(path, "config.json").is_file():
            raise FileNotFoundError(f"model {model!r} is registered at {path}, which holds no config.json")
        return path, _slug(model)
    folder = Path(model).expanduser()
    if folder.is_dir():
        resolved = folder.resolve()
        return str(resolved), f"{_slug(resolved.name)}-{fingerprint(str(resolved))[:8]}"
    return model, _slug(model)


def resolve_model(ws: Workspace, model: str) -> ModelRef:
    path, key = _resolve_one(ws, model)
    marker = Path(path) / QSFT_FILE
    if marker.is_file():
        passage_model = json.loads(marker.read_text(encoding="utf-8"))["passage_model"]
        passage_path, passage_key = _resolve_one(ws, passage_model)
        return ModelRef(model, path, key, passage_model, passage_path, passage_key)
    return ModelRef(model, path, key, model, path, key)


def model_identity(path: str) -> Any:
    """What identifies a model's weights: file hashes of a local folder, else the hub name."""
    folder = Path(path)
    if not folder.is_dir():
        return path
    return {f: file_sha256(folder / f) for f in ("config.json", "model.safetensors") if (folder / f).is_file()}


def dense_dir(ws: Workspace, key: str) -> Path:
    return ws.indexes_dir / DENSE_DIR / key


def _load(path: str):
    from models.retriever import load_retriever

    return load_retriever(path)


def _corpus_fingerprint(ws: Workspace) -> str:
    if ws.rows("passages") == 0:
        raise ValueError("the passages table is empty: ingest a dump or import passages first")
    return ws.table_version("passages")


# --- encode ---------------------------------------------------------------------------------


@task(name="dense-encode", tags=["gpu"])
def encode_task(
    workspace: str, model: str, shard_size: int, batch_size: int, dtype: str, precision: str
) -> dict[str, Any]:
    from pipelines.dense.sharded_encoding import default_devices, encode_corpus

    ws = Workspace.resolve(workspace)
    ref = resolve_model(ws, model)
    corpus_fp = _corpus_fingerprint(ws)
    retriever = _load(ref.passage_path)
    devices = default_devices()
    out = dense_dir(ws, ref.passage_key) / EMBEDDINGS
    result = encode_corpus(
        retriever, ws.scan("passages", columns=PASSAGE_COLUMNS, batch_size=4096), out,
        corpus_fingerprint=corpus_fp, shard_size=shard_size, batch_size=batch_size, dtype=dtype,  # type: ignore[arg-type]
        devices=devices, precision=precision,  # type: ignore[arg-type]
        retriever_factory=functools.partial(_load, ref.passage_path) if len(devices) > 1 else None,
        total=ws.rows("passages"),
    )
    manifest = result.manifest
    report = {"model": model, "embeddings": str(out), "passages": manifest.num_passages, "shards": len(manifest.shards),
              "dim": manifest.dim, "dtype": manifest.dtype, "precision": manifest.precision,
              "encoded_now": result.encoded_passages, "devices": [d or "cpu" for d in devices]}  # fmt: skip
    if result.restart_reason:
        report["restarted"] = result.restart_reason
    return {**report, "noop": result.skipped}


@flow(name="dense-encode")
def encode_flow(
    model: str,
    workspace: str | None = None,
    shard_size: int = 50_000,
    batch_size: int = 128,
    dtype: str = "float32",
    precision: str = "auto",
    runner: RunnerSettings | None = None,
) -> dict[str, Any]:
    """Encode every passage with the model's passage encoder into resumable shards.

    Without a runner (and no ``$ODQA_DASK_ADDRESS``) one process encodes, or one per GPU; with
    one, a task per shard runs on that runner (threads, processes, a Dask cluster). The
    embeddings are the same either way.
    """
    ws = Workspace.resolve(workspace)
    with flow_run_logs():  # progress records from any thread of this process reach this run's logs
        report = _encode(ws, model, shard_size, batch_size, dtype, precision, runner)
    stage_logger().info("encode %s: %s", model, report)
    return report


def _encode(ws: Workspace, model: str, shard_size: int, batch_size: int, dtype: str, precision: str,
            runner: RunnerSettings | None) -> dict[str, Any]:  # fmt: skip
    """Encode in process (`encode_task`) or, given a runner, one mapped task per shard."""
    from flows.dense_parallel import encode_on_runner

    runner = mapping_runner(runner)
    if runner is None:
        return encode_task(str(ws.root), model, shard_size, batch_size, dtype, precision)
    report = encode_on_runner(runner, model=model, workspace=str(ws.root), shard_size=shard_size,
                              batch_size=batch_size, dtype=dtype, precision=precision)  # fmt: skip
    return {**report, "runner": runner.describe()}


# --- index ----------------------------------------------------------------------------------


def _index_params(index_type: str, hnsw_m: int | None, nlist: int | None, pq_m: int | None,
                  shards_per_part: int | None):  # fmt: skip
    from pipelines.dense.faiss_index import INDEX_TYPES, IndexParams

    if index_type not in INDEX_TYPES:
        raise ValueError(f"index type must be one of {INDEX_TYPES}, got {index_type!r}")
    defaults = IndexParams()
    return IndexParams(hnsw_m=hnsw_m or defaults.hnsw_m, nlist=nlist, pq_m=pq_m, shards_per_part=shards_per_part)


def planned_build(embeddings: Path, target: Path, index_type: str, params: Any, memory_gb: float | None) -> Any:
    """Plan the build (logged, refused when the memory budget cannot hold it), then build with
    the plan's parameters (parts sized to the budget). Returns the index metadata."""
    from pipelines.dense.faiss_index import build_index
    from pipelines.dense.index_planner import plan_embeddings

    plan, text = plan_embeddings(embeddings, index_type, params, memory_gb)  # type: ignore[arg-type]
    stage_logger().info("%s", text)
    return build_index(embeddings, target, index_type=index_type, params=plan.params)  # type: ignore[arg-type]


@task(name="dense-index-build")
def index_task(workspace: str, model: str, index_type: str, params: dict[str, Any],
               memory_gb: float | None = None) -> dict[str, Any]:  # fmt: skip
    from pipelines.dense.faiss_index import IndexParams, read_index_metadata

    ws = Workspace.resolve(workspace)
    ref = resolve_model(ws, model)
    folder = dense_dir(ws, ref.passage_key)
    before = read_index_metadata(folder / index_type)
    meta = planned_build(folder / EMBEDDINGS, folder / index_type, index_type, IndexParams(**params), memory_gb)
    noop = before is not None and before.to_json() == meta.to_json()
    return {"model": model, "index": str(folder / index_type), "type": index_type, "vectors": meta.num_vectors,
            "parts": len(meta.parts), "params": meta.params, "noop": noop}  # fmt: skip


@flow(name="dense-index-build")
def index_build_flow(
    model: str,
    index_type: str = "flat",
    workspace: str | None = None,
    hnsw_m: int | None = None,
    nlist: int | None = None,
    pq_m: int | None = None,
    shards_per_part: int | None = None,
    batch_size: int = 128,
    precision: str = "auto",
    runner: RunnerSettings | None = None,
    memory_gb: float | None = None,
) -> dict[str, Any]:
    """Build a FAISS index of the model's passage embeddings (encoding them first if needed,
    on the runner if one is given: see `encode_flow`). The build plan (RAM, disk, time) is
    logged first; with `memory_gb` the index is split into parts that each fit the budget, or
    the build is refused when none can."""
    log = stage_logger()
    ws = Workspace.resolve(workspace)
    params = _index_params(index_type, hnsw_m, nlist, pq_m, shards_per_part)
    with flow_run_logs():
        encoded = _encode(ws, model, 50_000, batch_size, "float32", precision, runner)
        report = index_task(str(ws.root), model, index_type, asdict(params), memory_gb)
    report["noop"] = bool(report["noop"] and encoded["noop"])
    log.info("index build %s: %s", model, report)
    return report


def open_model_index(ws: Workspace, ref: ModelRef, index_type: str, retriever=None):
    """The model's index, refused (StaleIndexError) when built for other weights or passages."""
    from pipelines.dense.faiss_index import open_index

    folder = dense_dir(ws, ref.passage_key) / index_type
    if not folder.is_dir():
        raise FileNotFoundError(f"no {index_type} index for model {ref.passage_name!r}; build it with: "
                                f"odqa index build --model {ref.passage_name} --type {index_type}")  # fmt: skip
    passage_model = retriever if retriever is not None and ref.passage_path == ref.path else _load(ref.passage_path)
    return open_index(dense_dir(ws, ref.passage_key) / index_type, passage_model.config_fingerprint(),
                      _corpus_fingerprint(ws), mmap=None)  # fmt: skip


# --- indexes the verbs need -----------------------------------------------------------------


def _newer_than(model_path: str, index_dir: Path) -> bool:
    """Whether a local model's weights or config changed after the index was written (a model
    retrained under the same id); a Hugging Face name is taken as unchanged."""
    folder, meta_file = Path(model_path), index_dir / "index.json"
    if not folder.is_dir() or not meta_file.is_file():
        return False
    built = meta_file.stat().st_mtime
    return any((folder / name).is_file() and (folder / name).stat().st_mtime > built
               for name in ("config.json", "model.safetensors"))  # fmt: skip


def index_problem(ws: Workspace, ref: ModelRef, index_type: str, retriever=None) -> str | None:
    """Why the model's index cannot answer now (missing; stale because the passages or the
    weights changed), or None. The weights are fingerprinted only when the model's files are
    newer than the index, so an up-to-date index costs no model load."""
    from pipelines.dense.faiss_index import read_index_metadata

    folder = dense_dir(ws, ref.passage_key) / index_type
    meta = read_index_metadata(folder)
    if meta is None:
        return f"no {index_type} index for model {ref.passage_name}"
    if meta.corpus_fingerprint != _corpus_fingerprint(ws):
        return f"the {index_type} index of model {ref.passage_name} is stale (corpus changed)"
    if _newer_than(ref.passage_path, folder):
        model = retriever if retriever is not None and ref.passage_path == ref.path else _load(ref.passage_path)
        if model.config_fingerprint() != meta.model_fingerprint:
            return f"the {index_type} index of model {ref.passage_name} is stale (model changed)"
    return None


def ensure_index(ws: Workspace, ref: ModelRef, index_type: str, retriever=None) -> None:
    """Build the model's index when it is missing or stale, as `odqa index build` would (encoding
    first where the embeddings are missing or stale; default index parameters), saying so on the
    terminal. Inside a flow run the build is a subflow (visible in the UI); outside one (`odqa
    search` without a Prefect server) it runs directly."""
    from prefect.context import FlowRunContext

    from flows.console import tell

    problem = index_problem(ws, ref, index_type, retriever)
    if problem is None:
        return
    tell("%s; building it (as odqa index build --model %s --type %s would) ...", problem, ref.passage_name,
         index_type)  # fmt: skip
    if FlowRunContext.get() is not None:
        index_build_flow(model=ref.passage_name, index_type=index_type, workspace=str(ws.root))
        return
    encode_task.fn(str(ws.root), ref.passage_name, 50_000, 128, "float32", "auto")
    index_task.fn(str(ws.root), ref.passage_name, index_type,
                  asdict(_index_params(index_type, None, None, None, None)))  # fmt: skip


# --- dense and hybrid runs (registered in flows.retrieval.RETRIEVERS) -----------------------


def _require(options: dict[str, Any], name: str, retriever: str) -> Any:
    if options.get(name) is None:
        raise ValueError(f"the {retriever} retriever needs --{name.replace('_', '-')}")
    return options[name]


def search_questions(retriever, index, questions: pa.Table, k: int) -> Iterator[pa.Table]:
    """Top-k run rows (question_id, passage_id, rank, score) of each chunk of QUESTION_CHUNK
    questions. The encoder pads within what it is given, so the same chunks give the same
    vectors bit for bit, whichever process or task searches them."""
    qids, texts = questions["question_id"].cast(pa.string()), questions["question"].to_pylist()
    with progress(len(qids), "dense search", "questions") as bar:
        for start in range(0, len(qids), QUESTION_CHUNK):
            vectors = retriever.encode_questions(texts[start:start + QUESTION_CHUNK])
            found = index.search_run(vectors, k, qids.slice(start, QUESTION_CHUNK))
            bar.update(len(vectors))  # before the yield: a consumer may stop after the last chunk
            yield found


def mine_questions(ws: Workspace, retriever, index, questions: pa.Table, depth: int, count: int, mode: str) -> Any:
    """Hard negatives of `questions` (a MiningResult): the top `depth` minus gold and
    answer-bearing passages, best `count` kept."""
    from flows.retrieval import passage_texts
    from pipelines.dense.mining import mine_hard_negatives

    run = pa.concat_tables(list(search_questions(retriever, index, questions, depth)))
    texts, missing = passage_texts(ws, run["passage_id"].to_pylist(), with_title=False)
    if missing:
        raise RuntimeError(f"{missing} retrieved passages are not in the passages table; rebuild the index")
    return mine_hard_negatives(run, questions, texts, num_negatives=count, depth=depth, mode=mode)  # type: ignore[arg-type]


def _dense_candidates(ws: Workspace, questions: pa.Table, k: int, options: dict[str, Any]) -> Iterator[pa.Table]:
    """Dense top-k of each question chunk: question_id, passage_id, rank (1-based), score."""
    ref = resolve_model(ws, _require(options, "model", "dense"))
    index_type = options.get("index_type") or "flat"
    retriever = _load(ref.path)
    ensure_index(ws, ref, index_type, retriever)
    index = open_model_index(ws, ref, index_type, retriever)
    yield from search_questions(retriever, index, questions, k)


def _dense_config(ws: Workspace, options: dict[str, Any]) -> dict[str, Any]:
    from pipelines.dense.faiss_index import read_index_metadata

    ref = resolve_model(ws, _require(options, "model", "dense"))
    index_type = options.get("index_type") or "flat"
    ensure_index(ws, ref, index_type)
    meta = read_index_metadata(dense_dir(ws, ref.passage_key) / index_type)
    return {"model": ref.name, "model_path": ref.path, "model_identity": model_identity(ref.path),
            "index_type": index_type, "index_model_fingerprint": meta.model_fingerprint, "index_corpus": meta.corpus_fingerprint,
            "index_params": meta.params}  # fmt: skip


def _dense_batches(ws: Workspace, questions: pa.Table, k: int, options: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    for table in _dense_candidates(ws, questions, k, options):
        yield from table.to_batches()


def stored_alpha(ws: Workspace, ref: ModelRef) -> float | None:
    path = dense_dir(ws, ref.key) / HYBRID_FILE
    return json.loads(path.read_text(encoding="utf-8"))["alpha"] if path.is_file() else None


def _hybrid_alpha(ws: Workspace, options: dict[str, Any]) -> float:
    if options.get("alpha") is not None:
        return float(options["alpha"])
    ref = resolve_model(ws, _require(options, "model", "hybrid"))
    alpha = stored_alpha(ws, ref)
    if alpha is None:
        raise ValueError(f"no tuned alpha for model {ref.name!r}: pass --alpha or run odqa tune-hybrid first")
    return alpha


def _bm25_options(options: dict[str, Any]) -> dict[str, Any]:
    from pipelines.retrieval.bm25 import DEFAULT_B, DEFAULT_K1

    return {"k1": options.get("k1", DEFAULT_K1), "b": options.get("b", DEFAULT_B),
            "threads": options.get("threads") or os.cpu_count() or 1}  # fmt: skip


def _hybrid_config(ws: Workspace, options: dict[str, Any]) -> dict[str, Any]:
    from flows.retrieval import RETRIEVERS

    bm25 = RETRIEVERS["bm25"][0](ws, _bm25_options(options))
    return {**_dense_config(ws, options), "alpha": _hybrid_alpha(ws, options), "depth": options.get("depth") or 100,
            "bm25": bm25}  # fmt: skip


def _candidates_of_both(ws: Workspace, questions: pa.Table, options: dict[str, Any]) -> Iterator[pa.Table]:
    """TASER's K' candidates from dense and from BM25, fused-ready, chunk by chunk of questions."""
    from flows.retrieval import RETRIEVERS
    from pipelines.dense.hybrid import fusion_candidates

    depth = options.get("depth") or 100
    dense = _dense_candidates(ws, questions, depth, options)
    for start in range(0, questions.num_rows, QUESTION_CHUNK):
        chunk = questions.slice(start, QUESTION_CHUNK)
        dense_table = next(dense)
        sparse = pa.Table.from_batches(list(RETRIEVERS["bm25"][1](ws, chunk, depth, _bm25_options(options))))
        yield fusion_candidates(dense_table, sparse, depth)


def _hybrid_batches(ws: Workspace, questions: pa.Table, k: int, options: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    from pipelines.dense.hybrid import fuse

    alpha = _hybrid_alpha(ws, options)
    for candidates in _candidates_of_both(ws, questions, options):
        yield from fuse(candidates, alpha, k).to_batches()


def register_retrievers() -> None:
    """Make ``dense`` and ``hybrid`` available to ``flows.retrieval.retrieve_flow``."""
    from flows.retrieval import RETRIEVERS

    RETRIEVERS.setdefault("dense", (_dense_config, _dense_batches))
    RETRIEVERS.setdefault("hybrid", (_hybrid_config, _hybrid_batches))


register_retrievers()


@flow(name="dense-retrieve")
def dense_retrieve_flow(
    dataset: str,
    split: str,
    run: str,
    model: str,
    retriever: str = "dense",
    k: int = 100,
    alpha: float | None = None,
    index_type: str = "flat",
    depth: int = 100,
    trec: str | None = None,
    workspace: str | None = None,
) -> dict[str, Any]:
    """A dense or hybrid run into `runs` (the same stage and no-op rules as `odqa retrieve`)."""
    from flows.retrieval import run_retriever

    if retriever not in ("dense", "hybrid"):
        raise ValueError(f"retriever must be dense or hybrid, got {retriever!r}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    options = {"model": model, "alpha": alpha, "index_type": index_type, "depth": depth, **_bm25_options({})}
    return run_retriever(Workspace.resolve(workspace), retriever, dataset, split, run, k, options, trec)


# --- hybrid weight --------------------------------------------------------------------------


def _parse_split(spec: str) -> tuple[str, str]:
    parts = spec.split(":")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"dataset spec {spec!r}: expected NAME:SPLIT")
    return parts[0], parts[1]


@flow(name="tune-hybrid")
def tune_hybrid_flow(
    model: str,
    dev: list[str],
    k: int = 20,
    depth: int = 100,
    index_type: str = "flat",
    workspace: str | None = None,
) -> dict[str, Any]:
    """TASER's single alpha: best dev R@k over 0.5..2.0 (step 0.1) on the combined dev sets.

    The chosen alpha goes to ``hybrid.json`` (used by hybrid runs without --alpha) and the
    R@k of every alpha to the ``metrics`` table (run ``tune-hybrid:<model key>``).
    """
    from flows.evaluation import match_mode
    from flows.retrieval import load_questions, passage_texts, questions_fingerprint
    from pipelines.dense.hybrid import DEFAULT_ALPHAS, candidate_hits, recall_at_k

    log = stage_logger()
    ws = Workspace.resolve(workspace)
    if not dev:
        raise ValueError("give at least one --dev NAME:SPLIT")
    specs = [_parse_split(s) for s in dev]
    ref = resolve_model(ws, model)
    options = {"model": model, "index_type": index_type, "depth": depth}
    config = _dense_config(ws, options)
    stage = f"tune-hybrid:{ref.key}"
    questions_fp = [questions_fingerprint(ws, d, s, ["question_id", "question", "answers"]) for d, s in specs]
    stage_fp = fingerprint(stage, config, specs, k, depth, questions_fp, ws.table_version("passages"))
    if ws.stage_is_current(stage, stage_fp) and stored_alpha(ws, ref) is not None:
        log.info("%s: same model, index and dev questions (no-op)", stage)
        return {**ws.stage_record(stage).report, "noop": True}
    hits, candidates_all, total = [], [], 0
    for dataset, split in specs:
        questions = load_questions(ws, dataset, split, ["question_id", "question", "answers"])
        answers = dict(zip(questions["question_id"].to_pylist(), questions["answers"].to_pylist(), strict=True))
        total += questions.num_rows
        for candidates in _candidates_of_both(ws, questions, options):
            texts, _ = passage_texts(ws, candidates["passage_id"].to_pylist(), with_title=False)
            hits.append(candidate_hits(candidates, answers, texts, match_mode(dataset, "auto")))
            # Question ids of different dev sets may collide; keep them apart.
            prefixed = pc.binary_join_element_wise(f"{dataset}:{split}", candidates["question_id"], "|")
            candidates_all.append(candidates.set_column(0, "question_id", prefixed))
    candidates = pa.concat_tables(candidates_all)
    hit = np.concatenate(hits)
    recall = {float(a): recall_at_k(candidates, hit, float(a), k, total) for a in DEFAULT_ALPHAS}
    best_value = max(recall.values())
    best = min(a for a, r in recall.items() if r == best_value)
    dense_only = recall_at_k(candidates, hit, 0.0, k, total)
    created = datetime.now(timezone.utc)
    info = {"model": model, "dev": dev, "k": k, "depth": depth, "index_type": index_type}
    rows = [{"run": stage, "dataset": "+".join(d for d, _ in specs), "split": "+".join(s for _, s in specs),
             "metric": f"R@{k}", "value": r, "group": f"alpha={a:.1f}", "created_at": created,
             "config": json.dumps(info)} for a, r in recall.items()]  # fmt: skip
    report = {**info, "alpha": best, f"dev_R@{k}": round(best_value, 4), f"dense_only_R@{k}": round(dense_only, 4),
              "questions": total}  # fmt: skip
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        tx.replace_source("metrics", stage)
        tx.write("metrics", rows, source=stage)
        target = dense_dir(ws, ref.key) / HYBRID_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps({**report, "recall": {f"{a:.1f}": r for a, r in recall.items()}}, indent=2))
        os.replace(tmp, target)
        tx.report = report
    log.info("%s: %s", stage, report)
    return {**report, "noop": False}


# --- search ---------------------------------------------------------------------------------


@flow(name="search")
def search_flow(
    questions: list[str],
    retriever: str = "bm25",
    model: str | None = None,
    k: int = 10,
    alpha: float | None = None,
    index_type: str = "flat",
    workspace: str | None = None,
) -> list[dict[str, Any]]:
    """Top-k passages (rank, score, passage_id, title, text) for each free-text question."""
    from flows.retrieval import RETRIEVERS

    if retriever not in ("bm25", "dense", "hybrid"):
        raise ValueError(f"retriever must be bm25, dense or hybrid, got {retriever!r}")
    ws = Workspace.resolve(workspace)
    table = pa.table({"question_id": [str(i) for i in range(len(questions))], "question": list(questions)})
    options = {"model": model, "alpha": alpha, "index_type": index_type, "depth": max(100, k), **_bm25_options({})}
    run = pa.Table.from_batches(list(RETRIEVERS[retriever][1](ws, table, k, options)))
    ids = pa.array(sorted(set(run["passage_id"].to_pylist())), pa.string())
    passages = ws.read_table("passages", columns=PASSAGE_COLUMNS, filter=pc.field("passage_id").isin(ids))
    by_id = {row["passage_id"]: row for row in passages.to_pylist()}
    results = []
    for row in run.sort_by([("question_id", "ascending"), ("rank", "ascending")]).to_pylist():
        passage = by_id.get(row["passage_id"], {})
        results.append({"question": questions[int(row["question_id"])], "rank": row["rank"], "score": row["score"],
                        "passage_id": row["passage_id"], "title": passage.get("title"),
                        "text": passage.get("text")})  # fmt: skip
    return results


# --- hard negatives -------------------------------------------------------------------------


def _negatives_file(ws: Workspace, name: str) -> Path:
    return ws.indexes_dir / DENSE_DIR / "negatives" / f"{_slug(name)}.parquet"


def _write_parquet(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def _first_round_negatives(ws: Workspace, dataset: str, split: str, questions: pa.Table) -> pa.Table:
    """P1: the hard negatives the split had before its first mining (BM25's, DPR recipe).

    Kept in a file on the first mining, so mining again (another model, another round) combines
    with the original P1 rather than with an earlier P1 u P2.
    """
    import pyarrow.parquet as pq

    path = _negatives_file(ws, f"p1-{dataset}-{split}")
    if path.is_file():
        return pq.read_table(path)
    p1 = pa.table({"question_id": questions["question_id"],
                   "hard_negative_ids": questions["hard_negative_ids"].cast(pa.list_(pa.string()))})  # fmt: skip
    _write_parquet(p1, path)
    return p1


@flow(name="mine-negatives")
def mine_flow(
    model: str,
    dataset: str,
    split: str,
    mode: str = "single-set",
    depth: int = 100,
    count: int = 30,
    index_type: str = "flat",
    workspace: str | None = None,
    runner: RunnerSettings | None = None,
    question_batch: int = 4 * QUESTION_CHUNK,
) -> dict[str, Any]:
    """Mine P2 with MODEL (top-`depth` minus gold and answer-bearing passages, best `count` kept)
    and set the split's hard_negative_ids to P1 u P2 (single-set) or P2 (multi-set).

    With a runner (or ``$ODQA_DASK_ADDRESS``) the questions are mined in mapped tasks of
    `question_batch` questions on it; the negatives are the same either way."""
    from flows.retrieval import load_questions, questions_fingerprint, rewrite_hard_negatives
    from pipelines.dense.mining import TRAINING_MODES, round_negatives

    if mode not in TRAINING_MODES:
        raise ValueError(f"mode must be one of {TRAINING_MODES}, got {mode!r}")
    log = stage_logger()
    ws = Workspace.resolve(workspace)
    columns = ["question_id", "question", "answers", "positive_ids", "hard_negative_ids"]
    options = {"model": model, "index_type": index_type}
    config = _dense_config(ws, options)
    stage = f"mine:{dataset}:{split}"
    questions_fp = questions_fingerprint(ws, dataset, split, ["question_id", "question", "answers", "positive_ids"])
    stage_fp = fingerprint(stage, config, mode, depth, count, questions_fp)
    if ws.stage_is_current(stage, stage_fp):
        log.info("%s: same model, questions and parameters (no-op)", stage)
        return {**ws.stage_record(stage).report, "noop": True}
    questions = load_questions(ws, dataset, split, columns)
    p1 = _first_round_negatives(ws, dataset, split, questions)
    mined = _mine(ws, model, dataset, split, questions, depth, count, options, runner, question_batch)
    _write_parquet(mined.negatives, _negatives_file(ws, f"p2-{resolve_model(ws, model).key}-{dataset}-{split}"))
    combined = round_negatives(2, mode, p1, mined.negatives)  # type: ignore[arg-type]
    negatives = dict(zip(combined["question_id"].to_pylist(), combined["hard_negative_ids"].to_pylist(),
                         strict=True))  # fmt: skip
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        updated = rewrite_hard_negatives(tx, dataset, split, negatives)
        report = {"model": model, "dataset": dataset, "split": split, "mode": mode, "depth": depth, "count": count,
                  "questions": questions.num_rows, "questions_updated": updated,
                  "excluded_gold": mined.excluded_gold, "excluded_answer_bearing": mined.excluded_answer,
                  "without_negatives": mined.without_negatives,
                  "mean_negatives": round(float(np.mean([len(v) for v in negatives.values()] or [0])), 2)}  # fmt: skip
        tx.report = report
    log.info("%s: %s", stage, report)
    return {**report, "noop": False}


def _mine(ws: Workspace, model: str, dataset: str, split: str, questions: pa.Table, depth: int, count: int,
          options: dict[str, Any], runner: RunnerSettings | None, question_batch: int) -> Any:  # fmt: skip
    """Hard negatives of the split (a MiningResult): in process, or in mapped batches on a runner."""
    from flows.dense_parallel import mine_on_runner
    from flows.evaluation import match_mode

    runner = mapping_runner(runner)
    if runner is not None:
        return mine_on_runner(runner, model=model, dataset=dataset, split=split, depth=depth, count=count,
                              index_type=options["index_type"], batch=question_batch, workspace=str(ws.root))  # fmt: skip
    ref = resolve_model(ws, model)
    retriever = _load(ref.path)
    index = open_model_index(ws, ref, options["index_type"], retriever)
    return mine_questions(ws, retriever, index, questions, depth, count, match_mode(dataset, "auto"))


# --- query-side fine-tuning -----------------------------------------------------------------


@flow(name="qsft")
def qsft_flow(
    model: str,
    train: list[str],
    model_id: str,
    index_type: str = "flat",
    epochs: int = 2,
    batch_size: int = 24,
    lr: float = 2e-5,
    warmup_steps: int = 100,
    top_k: int = 100,
    seed: int = 0,
    workspace: str | None = None,
) -> dict[str, Any]:
    """Thesis 5.2: fine-tune MODEL's question side against its fixed index on TRAIN questions,
    register the result as MODEL_ID (its passage side stays MODEL's: same embeddings, same index).

    Answer matching needs passage texts, so the passages' text column is held in memory.
    """
    from flows.evaluation import match_mode
    from flows.retrieval import load_questions, questions_fingerprint
    from models.base import replace_directory
    from pipelines.dense.qsft import QsftConfig, query_side_finetune
    from pipelines.dense.sharded_encoding import EncodedCorpus

    log = stage_logger()
    ws = Workspace.resolve(workspace)
    if "/" in model_id or model_id.startswith("."):
        raise ValueError(f"model id {model_id!r} must be a plain name (no '/', not starting with '.')")
    ref = resolve_model(ws, model)
    specs = [_parse_split(s) for s in train]
    config = _dense_config(ws, {"model": model, "index_type": index_type})
    params = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "warmup_steps": warmup_steps, "top_k": top_k,
              "seed": seed}  # fmt: skip
    stage = f"qsft-{model_id}"
    questions_fp = [questions_fingerprint(ws, d, s, ["question_id", "question", "answers"]) for d, s in specs]
    stage_fp = fingerprint(stage, config, specs, params, questions_fp)
    target = ws.models_dir / model_id
    if ws.stage_is_current(stage, stage_fp) and (target / "config.json").is_file():
        log.info("%s: same model, index, questions and parameters (no-op)", stage)
        return {**ws.stage_record(stage).report, "noop": True}
    retriever = _load(ref.path)
    index = open_model_index(ws, ref, index_type, retriever)
    corpus = EncodedCorpus(dense_dir(ws, ref.passage_key) / EMBEDDINGS)
    texts: dict[str, str] = {}
    for batch in ws.scan("passages", columns=["passage_id", "text"]):
        texts.update(zip(batch.column(0).to_pylist(), (t or "" for t in batch.column(1).to_pylist()), strict=True))
    questions, answers = [], []
    for dataset, split in specs:
        table = load_questions(ws, dataset, split, ["question", "answers"])
        questions += table["question"].to_pylist()
        answers += [a or [] for a in table["answers"].to_pylist()]
    result = query_side_finetune(
        retriever, index, corpus.vectors, questions, answers, texts,
        QsftConfig(epochs=epochs, batch_size=batch_size, learning_rate=lr, warmup_steps=warmup_steps, top_k=top_k,
                   seed=seed, match_mode=match_mode(specs[0][0], "auto")),
    )  # fmt: skip
    staging = ws.models_dir / f".{model_id}.tmp-qsft"
    retriever.save_pretrained(staging)
    marker = {"passage_model": ref.passage_name, "index_type": index_type, **params}
    (staging / QSFT_FILE).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    replace_directory(staging, target)
    report = {"model_id": model_id, "from": model, "train": train, "questions": len(questions), "steps": result.steps,
              "epoch_losses": [round(x, 4) for x in result.epoch_losses],
              "answerable_at_k": [round(x, 4) for x in result.answerable],
              "skipped_without_positive": result.skipped_without_positive}  # fmt: skip
    record = {"model_id": model_id, "arch": retriever.arch, "parameters": retriever.parameter_count(),
              "path": str(target), "base": model, "trained_on": ",".join(train),
              "created_at": datetime.now(timezone.utc), "config": json.dumps({"qsft": params, **report})}  # fmt: skip
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        tx.replace_source("models", model_id)
        tx.write("models", [record], source=model_id)
        tx.report = report
    log.info("%s: %s", stage, report)
    return {**report, "noop": False}


# --- t-SNE probe ----------------------------------------------------------------------------


def _random_passages(ws: Workspace, n: int, rng: np.random.Generator, exclude: set[str]) -> pa.Table:
    """About ``n`` random passages not in ``exclude``, in one streamed pass (bounded memory)."""
    total = ws.rows("passages")
    wanted = np.sort(rng.choice(total, size=min(total, n + len(exclude)), replace=False))
    picked, offset = [], 0
    for batch in ws.scan("passages", columns=PASSAGE_COLUMNS):
        rows = wanted[(wanted >= offset) & (wanted < offset + batch.num_rows)] - offset
        if len(rows):
            chosen = pa.Table.from_batches([batch]).take(pa.array(rows))
            picked.append(chosen.filter(pc.invert(pc.is_in(chosen["passage_id"], pa.array(sorted(exclude),
                                                                                         pa.string())))))  # fmt: skip
        offset += batch.num_rows
    table = pa.concat_tables(picked) if picked else pa.table({c: pa.array([], pa.string()) for c in PASSAGE_COLUMNS})
    return table.slice(0, n)


@flow(name="plot-embeddings")
def plot_embeddings_flow(
    model: str,
    dataset: str | None = None,
    split: str | None = None,
    samples: int = 500,
    seed: int = 0,
    workspace: str | None = None,
) -> dict[str, Any]:
    """t-SNE of question vs passage embeddings (dual-encoder paper fig. 2) as a PNG in plots/.

    Questions are sampled from DATASET/SPLIT (default: all questions); passages are their
    positives, topped up with random passages.
    """
    from pipelines.dense.tsne_plot import plot_towers, project_towers

    ws = Workspace.resolve(workspace)
    ref = resolve_model(ws, model)
    selector = None
    if dataset:
        selector = pc.field("dataset") == dataset
        if split:
            selector = selector & (pc.field("split") == split)
    questions = ws.read_table("questions", columns=["question", "positive_ids"], filter=selector)
    if questions.num_rows == 0:
        raise ValueError("no questions to plot: import questions first (or check --dataset/--split)")
    rng = np.random.default_rng(seed)
    picked = questions.take(pa.array(np.sort(rng.choice(questions.num_rows, min(samples, questions.num_rows),
                                                        replace=False))))  # fmt: skip
    positives = sorted({p for ids in picked["positive_ids"].to_pylist() for p in (ids or [])})[:samples]
    passages = ws.read_table("passages", columns=PASSAGE_COLUMNS,
                             filter=pc.field("passage_id").isin(pa.array(positives, pa.string())))  # fmt: skip
    if passages.num_rows < samples:
        passages = pa.concat_tables([passages, _random_passages(ws, samples - passages.num_rows, rng, set(positives))])
    question_model = _load(ref.path)
    passage_model = question_model if ref.passage_path == ref.path else _load(ref.passage_path)
    q = question_model.encode_questions(picked["question"].to_pylist())
    p = passage_model.encode_passages([t or "" for t in passages["title"].to_pylist()], passages["text"].to_pylist())
    projection = project_towers(q, p, seed=seed)
    path = plot_towers(projection, ws.plots_dir / f"tsne-{ref.key}.png",
                       f"t-SNE of {ref.name}: {len(q)} questions, {len(p)} passages")  # fmt: skip
    return {"model": model, "plot": str(path), "questions": len(q), "passages": len(p),
            "tower_separation": round(projection.tower_separation, 3)}  # fmt: skip
