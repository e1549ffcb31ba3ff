"""`odqa encode`: every passage through a model's passage encoder, into resumable shards.

In this process (one worker process per GPU when there are several), or with a runner (or
`$ODQA_DASK_ADDRESS`) one Prefect task per shard on it: threads, processes or a Dask cluster.
The flow plans the shards of one `passages` snapshot, skips those the manifest lists as
finished, and maps one task per pending shard; a task reads its slice of that snapshot, encodes
it with the same length-sorted batches as the in-process path and writes its shard files
atomically; the flow alone records finished shards in the manifest (one writer), so a killed run
resumes with the shards it did not record. Both paths give the same vectors bit for bit.

The vectors of a passages version live in `indexes/dense/<model key>/<version>/embeddings`
(`storage.index_layout`). Encoding for new passages reuses the vectors the same model gave the
unchanged passages of an earlier version (`pipelines.dense.passage_diff`: same id, title and
text), so after a small change of the corpus only the new and changed passages are encoded.
Re-running with unchanged passages and model is a no-op; a kill resumes after the last shard.

Token ids come from the workspace's `passage_tokens` table (`storage.passage_tokens`), keyed by
the model's tokenizer content, passage format and maximum length: only passages it lacks are
tokenized (in worker processes) and added, so a second model with the same tokenizer, a mining
round's re-encode or a re-index tokenizes nothing it has seen. The report says how many passages
were tokenized and how many had their ids reused.
"""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE

from ...models.searchers import loaded_model
from ...models.searchers.dense import dense_build
from ...pipelines.dense.passage_diff import VectorReuse, write_keys
from ...pipelines.dense.shard_plan import ShardRange, pending_shards
from ...pipelines.dense.sharded_encoding import (
    DEFAULT_SHARD_SIZE,
    EncodedCorpus,
    NonFiniteVectors,
    as_storage,
    default_devices,
    encode_corpus,
    encode_shard,
    finished_encoding,
    inference_weights,
    iter_corpus_shards,
    prepare_out_dir,
    read_manifest,
    record_shard,
    resolve_precision,
    shard_columns,
    shard_tokens,
    token_feed,
    wanted_manifest,
    write_manifest,
    write_shard,
    written_shard,
)
from ...storage import Workspace
from ...storage.index_layout import DenseBuild, IndexLayout
from ...storage.model_registry import ModelRef, resolve_model
from ...storage.passage_tokens import PassageTokenStore
from ...storage.passages import PASSAGE_COLUMNS, passages_in_range, require_passages
from ...storage.reports import Report
from ..plumbing.concurrency_slots import gpu_slot
from ..plumbing.console import tell
from ..plumbing.report_text import log_report
from ..plumbing.runtime import flow_run_logs, stage_logger
from ..plumbing.task_runners import (
    RestoreTorchThreads,
    RunnerSettings,
    accelerator_needed,
    accelerator_request,
    limit_threads,
    mapping_runner,
    on_cluster,
    settled,
    task_threads,
)


@dataclass
class EncodeReport(Report):
    model: str
    embeddings: str
    passages: int
    shards: int
    dim: int
    dtype: str
    precision: str
    encoded_now: int  # passages encoded by this call (0 when the embeddings were complete)
    tokenized: int = 0  # passages tokenized by this call
    tokens_reused: int = 0  # passages whose token ids came from the passage_tokens table
    reused: int = 0  # vectors taken over from the model's encoding of earlier passages
    removed: int = 0  # passages of that earlier encoding no longer in the corpus
    seconds: float = 0.0
    devices: list[str] = field(default_factory=list)
    restarted: str | None = None  # why earlier shards were discarded, if they were
    runner: str | None = None  # the task runner the shards were mapped on, if any
    tasks: int | None = None  # shard tasks mapped on it
    taken: int = 0  # shard tasks a cluster ran again that found their shard written (not encoded twice)


def remember_model(ws: Workspace, ref: ModelRef) -> None:
    """Record which model the passage-side key stands for (releases and the service name it)."""
    IndexLayout.of(ws).record_model(ref.passage_key, ref.passage_name, ref.passage_path)


def _previous_vectors(ws: Workspace, ref: ModelRef, wanted, build: DenseBuild) -> VectorReuse | None:
    """The newest earlier encoding by the same model whose vectors can stand in for unchanged passages."""
    for earlier in IndexLayout.of(ws).other_embeddings(ref.passage_key, build.passages_version):
        reuse = VectorReuse.open(earlier, wanted)
        if reuse is not None:
            return reuse
    return None


def stored_dtype(ws: Workspace, ref: ModelRef, dtype: str | None, passages_version: str | None = None) -> str:
    """The stored vector type to encode with: the given one, else the one the model's current
    embeddings have (a build that needs embeddings takes them as they are), else float32."""
    if dtype is not None:
        return dtype
    existing = read_manifest(dense_build(ws, ref, passages_version).embeddings)
    return existing.dtype if existing is not None else "float32"


def token_store(ws: Workspace, retriever: object) -> PassageTokenStore | None:
    """The stored token ids of the retriever's tokenization, if it has a fast tokenizer."""
    make = getattr(retriever, "passage_tokenizer", None)
    tokenizer = make() if callable(make) else None
    return PassageTokenStore(ws, tokenizer.tokenization()) if tokenizer is not None else None


def _tell_restart(reason: str | None) -> None:
    """Discarded work is said on the terminal too, not only in the log file."""
    if reason:
        tell("%s", reason)


@task(name="dense-encode")
def encode_task(workspace: str, ref: ModelRef, shard_size: int, batch_size: int, dtype: str,
                precision: str, passages_version: str | None = None) -> EncodeReport:  # fmt: skip
    """Encode in this process (one worker process per GPU when there are several), holding one of
    this machine's `gpu` slots for the encoding loop only: embeddings that are complete for this
    model and these passages (`passages_version`, default the current ones) are a no-op found
    before, whoever holds the slots."""
    ws = Workspace.resolve(workspace)
    remember_model(ws, ref)
    build = dense_build(ws, ref, passages_version)
    retriever = loaded_model(ref.passage_path).model
    devices = default_devices()
    wanted = wanted_manifest(retriever, build.passages_version, shard_size, batch_size, dtype, precision,  # type: ignore[arg-type]
                             devices)  # type: ignore[arg-type]  # fmt: skip
    done = finished_encoding(build.embeddings, wanted)
    if done is not None:
        stage_logger().info("%s: embeddings complete for this model and corpus; nothing to encode", build.embeddings)
        return EncodeReport(model=ref.name, embeddings=str(build.embeddings), passages=done.num_passages,
                            shards=len(done.shards), dim=done.dim, dtype=done.dtype, precision=done.precision,
                            encoded_now=0, devices=[d or "cpu" for d in devices], noop=True)  # fmt: skip
    # (imports torch: only a run that encodes pays for it)
    from ...models.retriever import load_retriever

    reuse = _previous_vectors(ws, ref, wanted, build)
    # the vectors and their keys from this very passages version, its files kept meanwhile
    with ws.reading_version("passages", build.passages_version, what=f"encode {ref.name}") as snapshot:
        with gpu_slot(f"encode {ref.name}", ws.root):
            started = time.perf_counter()  # the encoding's own time, not the wait for the slot
            result = encode_corpus(
                retriever, ws.scan("passages", columns=PASSAGE_COLUMNS, batch_size=4096, snapshot=snapshot),
                build.embeddings, corpus_fingerprint=build.passages_version, shard_size=shard_size,
                batch_size=batch_size, dtype=dtype, devices=devices, precision=precision,  # type: ignore[arg-type]
                retriever_factory=functools.partial(load_retriever, ref.passage_path) if len(devices) > 1 else None,
                total=snapshot.rows("passages"), reuse=reuse, token_store=token_store(ws, retriever),
            )  # fmt: skip
        _tell_restart(result.restart_reason)
        removed = 0
        if not result.skipped:
            write_keys(build.embeddings, ws.scan("passages", columns=PASSAGE_COLUMNS, batch_size=4096,
                                                 snapshot=snapshot))  # fmt: skip
            if reuse is not None and result.reused_passages:
                removed = reuse.previous_count() - reuse.ids_kept(EncodedCorpus(build.embeddings).ids())
    manifest = result.manifest
    return EncodeReport(
        model=ref.name, embeddings=str(build.embeddings), passages=manifest.num_passages, shards=len(manifest.shards),
        dim=manifest.dim, dtype=manifest.dtype, precision=manifest.precision,
        encoded_now=result.encoded_passages - result.reused_passages, reused=result.reused_passages,
        removed=removed, seconds=round(time.perf_counter() - started, 3), devices=[d or "cpu" for d in devices],
        restarted=result.restart_reason, noop=result.skipped, tokenized=result.tokenized,
        tokens_reused=result.tokens_reused,
    )  # fmt: skip


# --- one task per shard on a task runner ------------------------------------------------------


def _task_device(shard_index: int) -> str | None:
    """GPUs of the worker's machine in turn (by shard), else the retriever's own choice (CPU)."""
    import torch

    if torch.cuda.is_available():
        return f"cuda:{shard_index % torch.cuda.device_count()}"
    return None


@task(name="dense-encode-shard", cache_policy=NO_CACHE)
def encode_shard_task(
    workspace: str, passage_path: str, shard: dict[str, int], files: list[dict[str, Any]], out_dir: str,
    batch_size: int, precision: str, dtype: str, threads: int | None, model_fingerprint: str, dim: int,
    machine_slot: bool, passages_version: str,
) -> tuple[Any, str, bool, int, int]:  # fmt: skip
    """Encode one planned shard and write its files; returns (its ShardInfo, the device used,
    whether it encoded: a shard this run wrote already is taken as it is, passages tokenized,
    passages whose token ids came from the `passage_tokens` table). On this machine's
    runners a task holds a `gpu` slot (``machine_slot``) while it encodes (not to find its shard
    written already); on a cluster the workers' declared capacity decides instead."""
    limit_threads(threads)
    ws = Workspace.resolve(workspace)
    planned, out = ShardRange(**shard), Path(out_dir)
    device = _task_device(planned.index)
    resolve_precision(precision, [device])  # type: ignore[arg-type]  # refuses fp16 on a worker without a GPU
    try:  # the same column and null checks as the streamed path
        [(_, passages)] = list(
            iter_corpus_shards([passages_in_range(ws, files, planned.start, planned.stop)], planned.count)
        )
    except ValueError as error:
        raise ValueError(
            f"shard {planned.index} (passages {planned.start}..{planned.stop - 1}): {error}"
        ) from error
    ids, titles, texts = shard_columns(passages)
    done = written_shard(out, planned.index, ids, dim, dtype)  # type: ignore[arg-type]
    if done is not None:
        return done, device or "cpu", False, 0, 0
    loaded = loaded_model(passage_path)
    retriever = loaded.model
    if loaded.fingerprint != model_fingerprint:
        raise RuntimeError(
            f"the model at {passage_path} changed during the encoding run (fingerprint "
            f"{loaded.fingerprint[:12]}, the manifest has {model_fingerprint[:12]}); run the encoding "
            "again"
        )
    feed = token_feed(retriever, token_store(ws, retriever), passages_version, workers=0)  # a task is a worker already
    try:
        tokens = shard_tokens(retriever, feed, ids, titles, texts)
    finally:
        if feed is not None:
            feed.close()
    with gpu_slot(f"encode shard {planned.index}", ws.root) if machine_slot else contextlib.nullcontext():
        vectors = encode_shard(inference_weights(retriever, precision, device), titles, texts, batch_size=batch_size,  # type: ignore[arg-type]
                               device=device, precision=precision, tokens=tokens)  # type: ignore[arg-type]  # fmt: skip
    counts = (feed.tokenized, feed.reused) if feed is not None else (len(ids), 0)
    return write_shard(out, planned.index, ids, as_storage(vectors, dtype, ids)), device or "cpu", True, *counts  # type: ignore[arg-type]


@flow(name="dense-encode-mapped")
def encode_mapped_flow(
    model: str,
    workspace: str | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    batch_size: int = 128,
    dtype: str = "float32",
    precision: str = "auto",
    threads: int | None = None,
    runner: RunnerSettings | None = None,
    passages_version: str | None = None,
) -> EncodeReport:
    """Encode the passages (`passages_version`, default the current ones) with one task per
    pending shard on this flow's task runner; the same
    embeddings directory (manifest, shards, keys) as the in-process path writes, every passage
    encoded (no reuse of earlier vectors on this path). The manifest on the shared storage is
    written before any task starts and after every finished shard, so a lost worker or a killed
    client costs only the shards in flight."""
    log = stage_logger()
    ws = Workspace.resolve(workspace)
    ref = resolve_model(ws, model)
    remember_model(ws, ref)
    version = passages_version or require_passages(ws)
    # the one passages version every task reads (and the keys are written from), kept meanwhile
    with ws.reading_version("passages", version, what=f"encode {model} on a task runner") as snapshot:
        files = [asdict(entry) for entry in snapshot.files("passages")]
        out = dense_build(ws, ref, version).embeddings
        loaded = loaded_model(ref.passage_path)  # for what the manifest records about the model
        wanted = wanted_manifest(loaded.model, version, shard_size, batch_size, dtype,  # type: ignore[arg-type]
                                 precision, default_devices())  # type: ignore[arg-type]  # fmt: skip
        manifest, restart_reason = prepare_out_dir(out, wanted)
        _tell_restart(restart_reason)
        described = {"model": model, "embeddings": str(out), "dim": manifest.dim, "dtype": manifest.dtype,
                     "precision": manifest.precision}  # fmt: skip
        if manifest.complete:
            log.info("%s: embeddings complete for this model and corpus; nothing to encode", out)
            return EncodeReport(**described, passages=manifest.num_passages, shards=len(manifest.shards), encoded_now=0,
                                tasks=0, noop=True)  # fmt: skip
        write_manifest(out, manifest)  # what the shard files belong to, before any task writes one
        plan = pending_shards(snapshot.rows("passages"), manifest.shard_size, manifest.shards)
        log.info("encode %s: %d shard(s) to encode, %d already finished", model, len(plan), len(manifest.shards))
        encoded, taken, tokenized, tokens_reused, devices, failures = 0, 0, 0, 0, set(), []
        started = time.perf_counter()
        runner = runner or RunnerSettings()
        needs = accelerator_needed(runner)
        with RestoreTorchThreads(), accelerator_request(needs):
            futures = encode_shard_task.map(str(ws.root), ref.passage_path, [asdict(s) for s in plan], unmapped(files),
                                            str(out), batch_size, manifest.precision, dtype, threads,
                                            manifest.model_fingerprint, manifest.dim,
                                            not on_cluster(runner), version)  # fmt: skip
        planned = {future.task_run_id: shard for future, shard in zip(futures, plan, strict=True)}
        for future, result, error in settled(list(futures), needs if on_cluster(runner) else None):
            if error is not None:  # record every shard that did finish, then fail
                failures.append(error)
                continue
            info, device, fresh, shard_tokenized, shard_reused = result
            tokenized += shard_tokenized
            tokens_reused += shard_reused
            if info.count != planned[future.task_run_id].count:
                raise RuntimeError(f"shard {info.index}: {info.count} passages written, "
                                   f"{planned[future.task_run_id].count} planned")  # fmt: skip
            record_shard(out, manifest, info)
            encoded += info.count if fresh else 0
            taken += 0 if fresh else 1
            devices.add(device)
        if failures:  # the first failure's own words: the chained exception is not what a terminal shows
            first = failures[0]
            kind = NonFiniteVectors if isinstance(first, NonFiniteVectors) else RuntimeError
            raise kind(f"{len(failures)} of {len(plan)} shard task(s) failed; the {len(plan) - len(failures)} that "
                       f"finished are recorded and a re-run resumes after them. The first: {first}") from first  # fmt: skip
        manifest.complete = True
        write_manifest(out, manifest)
        write_keys(out, ws.scan("passages", columns=PASSAGE_COLUMNS, batch_size=4096, snapshot=snapshot))
        return EncodeReport(**described, passages=manifest.num_passages, shards=len(manifest.shards), encoded_now=encoded,
                            seconds=round(time.perf_counter() - started, 3), devices=sorted(devices),
                            restarted=restart_reason, tasks=len(plan), taken=taken, tokenized=tokenized,
                            tokens_reused=tokens_reused)  # fmt: skip


def encode_on_runner(runner: RunnerSettings, **params: Any) -> EncodeReport:
    """`encode_mapped_flow` with the runner's task runner and its thread share per task."""
    report = encode_mapped_flow.with_options(task_runner=runner.task_runner())(
        threads=task_threads(runner), runner=runner, **params
    )
    report.runner = runner.describe()
    return report


# --- mining ---------------------------------------------------------------------------------


# --- the verb ------------------------------------------------------------------------------------


def encode(ws: Workspace, ref: ModelRef, shard_size: int = DEFAULT_SHARD_SIZE, batch_size: int = 128,
           dtype: str | None = "float32", precision: str = "auto", runner: RunnerSettings | None = None,
           passages_version: str | None = None) -> EncodeReport:  # fmt: skip
    """Encode in process (`encode_task`) or, given a runner (or `$ODQA_DASK_ADDRESS`), one mapped
    task per shard on it (`encode_mapped_flow`); the same embeddings either way. Existing
    embeddings of the model and passages keep their shard size; ``dtype`` None keeps their type.
    `passages_version` (default: the current one) is the version encoded."""
    dtype = stored_dtype(ws, ref, dtype, passages_version)
    runner = mapping_runner(runner)
    try:
        if runner is None:
            return encode_task(str(ws.root), ref, shard_size, batch_size, dtype, precision, passages_version)
        # A flow's parameters are what its UI shows: the mapped flow gets the model's name and resolves it.
        return encode_on_runner(runner, model=ref.name, workspace=str(ws.root), shard_size=shard_size,
                                batch_size=batch_size, dtype=dtype, precision=precision,
                                passages_version=passages_version)  # fmt: skip
    except NonFiniteVectors as error:  # (a re-index encodes several models: say which one is broken)
        raise NonFiniteVectors(f"model {ref.name!r}: {error}") from None


@flow(name="dense-encode")
def encode_flow(
    model: str,
    workspace: str | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    batch_size: int = 128,
    dtype: str = "float32",
    precision: str = "auto",
    runner: RunnerSettings | None = None,
) -> EncodeReport:
    """Encode every passage with the model's passage encoder into resumable shards.

    Without a runner (and no `$ODQA_DASK_ADDRESS`) one process encodes, or one per GPU; with
    one, a task per shard runs on that runner (threads, processes, a Dask cluster). The
    embeddings are the same either way."""
    ws = Workspace.resolve(workspace)
    with flow_run_logs():  # progress records from any thread of this process reach this run's logs
        report = encode(ws, resolve_model(ws, model), shard_size, batch_size, dtype, precision, runner)
    log_report(f"encode {model}", report)
    return report
