"""Encoding shards and mining question batches mapped over a task runner (threads, a local Dask
cluster) give exactly what the unmapped path gives, and a mapped encoding resumes after a kill."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from odqa.flows.plumbing.sample_data import SAMPLE_DIR, SAMPLE_DUMP
from odqa.flows.plumbing.task_runners import RunnerSettings
from odqa.storage import Workspace

SHARD = 6  # 24 passages in 3 table files -> 4 shards, two of them crossing a file boundary
SMALL_SHARD = 4  # 6 shards: a worker can be lost mid-run, with shards left for the other one
FILE_ROWS = (10, 9, 5)
PASSAGES = sum(FILE_ROWS)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """The unmapped path on one thread too: the test machine's few cores are shared."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_shard_plan_matches_the_stream_cut_and_the_table_files() -> None:
    from odqa.pipelines.dense.shard_plan import ShardRange, all_shards, pending_shards
    from odqa.pipelines.dense.sharded_encoding import ShardInfo
    from odqa.storage.table_files import FileSpan, file_spans

    assert all_shards(14, 6) == [ShardRange(0, 0, 6), ShardRange(1, 6, 12), ShardRange(2, 12, 14)]
    finished = [ShardInfo(1, 6, "a", "b", "shard-00001.npy", "shard-00001.ids.parquet")]
    assert [s.index for s in pending_shards(14, 6, finished)] == [0, 2]
    with pytest.raises(ValueError, match="finished shard 2 holds 6 passages"):
        pending_shards(14, 6, [ShardInfo(2, 6, "a", "b", "v", "i")])  # the last shard holds 2
    assert file_spans([10, 9, 5], 6, 12) == [FileSpan(0, 6, 4), FileSpan(1, 0, 2)]
    assert file_spans([10, 0, 9], 8, 19) == [FileSpan(0, 8, 2), FileSpan(2, 0, 9)]
    with pytest.raises(ValueError, match="outside a table of 24 rows"):
        file_spans([10, 9, 5], 20, 25)


def test_stages_map_over_a_runner_when_given_one_or_a_cluster_address(monkeypatch) -> None:
    from odqa.flows.plumbing.task_runners import DASK_ADDRESS_ENV, mapping_runner, task_threads

    monkeypatch.delenv(DASK_ADDRESS_ENV, raising=False)
    assert mapping_runner(None) is None  # today's path: in process, or one process per GPU
    given = RunnerSettings(kind="processes", workers=1)
    assert mapping_runner(given) is given
    assert task_threads(given) == (os.cpu_count() or 1)  # one task at a time gets every core
    assert task_threads(RunnerSettings(kind="threads", workers=64)) == 1
    monkeypatch.setenv(DASK_ADDRESS_ENV, "tcp://10.0.0.5:8786")
    assert mapping_runner(None).kind == "dask"
    assert task_threads(RunnerSettings()) is None  # decided on the workers, from the cluster's layout


def test_settled_takes_and_releases_results_and_fails_without_workers() -> None:
    """The wait of a mapped stage: a finished Dask task's result is released on the cluster once
    taken (a worker lost later cannot make Dask run it again); a task no worker can run fails
    the wait once no worker declaring the resource is left for the grace period."""
    import operator
    from uuid import uuid4

    from distributed import Client, LocalCluster
    from prefect_dask.task_runners import PrefectDaskFuture

    from odqa.flows.plumbing.task_runners import ACCELERATOR, ClusterGone, settled

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as local, \
            Client(local) as client:  # fmt: skip
        done = PrefectDaskFuture(uuid4(), client.submit(operator.add, 1, 2))
        [(future, value, error)] = list(settled([done]))
        assert future is done and value == 3 and error is None
        deadline = time.monotonic() + 10
        while done.wrapped_future.key in local.scheduler.tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        assert done.wrapped_future.key not in local.scheduler.tasks
        stuck = PrefectDaskFuture(uuid4(), client.submit(operator.add, 1, 2, resources={ACCELERATOR: 1}))
        started = time.monotonic()
        with pytest.raises(
            ClusterGone, match=f"no Dask worker declaring {ACCELERATOR} left at .* 1 of 1 task"
        ):
            list(settled([stuck], ACCELERATOR, grace=1))
        assert time.monotonic() - started < 10


@pytest.fixture(scope="module")
def model() -> str:
    from odqa.flows.compositions.pipeline import default_base_model

    return default_base_model()


@pytest.fixture(scope="module")
def base(prefect_harness, tmp_path_factory) -> Path:
    """A workspace with the first 24 passages of the bundled sample dump (in three table files)
    and the bundled DPR-format sample questions."""
    from odqa.flows.stages.questions import import_questions_flow
    from odqa.flows.stages.wikipedia import ingest_wikipedia_flow

    root = tmp_path_factory.mktemp("parallel-dense")
    ingest_wikipedia_flow(dump=str(SAMPLE_DUMP), workspace=str(root / "full"))
    passages = Workspace.resolve(root / "full").read_table("passages").slice(0, PASSAGES)
    ws = Workspace.resolve(root / "base")
    with ws.transaction("sample-passages") as tx:
        start = 0
        for i, rows in enumerate(FILE_ROWS):
            tx.write("passages", passages.slice(start, rows), source="sample", part=f"part-{i}")
            start += rows
    assert [e.rows for e in ws.snapshot().files("passages")] == list(FILE_ROWS)
    import_questions_flow(fmt="dpr-qas", path=str(SAMPLE_DIR / "qa" / "dpr-qas-sample.tsv"), dataset="sample",
                          split="dev", workspace=str(ws.root))  # fmt: skip
    return ws.root


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as local:
        yield local.scheduler_address


def runners(cluster: str) -> dict[str, RunnerSettings | None]:
    """Today's path (no runner) and a local Dask cluster reached by its address, as a multi-machine
    run would reach one (the thread runner is exercised by the resume test)."""
    return {"unmapped": None, "dask": RunnerSettings(kind="dask", dask_address=cluster)}


def copy_of(base: Path, tmp_path: Path, name: str) -> str:
    shutil.copytree(base, tmp_path / name)
    return str(tmp_path / name)


def embeddings(ws: str, model: str) -> tuple[list[str], np.ndarray, list]:
    from odqa.models.searchers.dense import dense_build
    from odqa.pipelines.dense.sharded_encoding import EncodedCorpus
    from odqa.storage.model_registry import resolve_model

    space = Workspace.resolve(ws)
    corpus = EncodedCorpus(dense_build(space, resolve_model(space, model)).embeddings)
    return corpus.ids().to_pylist(), corpus.vectors(np.arange(len(corpus))), corpus.manifest.shards


@pytest.mark.e2e
def test_mapped_encoding_equals_the_unmapped_path(
    base: Path, cluster: str, model: str, tmp_path: Path
) -> None:
    from odqa.flows.stages.encode import encode_flow

    results = {}
    for name, runner in runners(cluster).items():
        ws = copy_of(base, tmp_path, name)
        report = encode_flow(model=model, workspace=ws, shard_size=SHARD, batch_size=4, runner=runner)
        assert report.passages == PASSAGES and report.shards == 4 and report.encoded_now == PASSAGES
        assert (report.tokenized, report.tokens_reused) == (PASSAGES, 0), report  # each task stores its own
        assert Workspace.resolve(ws).sql("SELECT count(*) AS n FROM passage_tokens").to_pylist() == [{"n": PASSAGES}]
        assert report.tasks == (None if runner is None else 4), report
        assert report.runner == (None if runner is None else f"dask {cluster}"), report
        results[name] = embeddings(ws, model)
    ids, vectors, shards = results["unmapped"]
    assert len(set(ids)) == PASSAGES and vectors.shape == (PASSAGES, 384)
    assert results["dask"][0] == ids
    assert results["dask"][1].tobytes() == vectors.tobytes()  # bit-equal fp32 on CPU
    assert results["dask"][2] == shards


@pytest.mark.e2e
def test_mapped_encoding_resumes_and_reindexes(base: Path, model: str, tmp_path: Path) -> None:
    from odqa.flows.compositions.reindex import reindex_flow
    from odqa.flows.stages.encode import encode_flow
    from odqa.models.searchers.dense import dense_build
    from odqa.pipelines.dense.sharded_encoding import EncodedCorpus, read_manifest, write_manifest
    from odqa.storage.index_layout import IndexLayout
    from odqa.storage.model_registry import resolve_model
    from odqa.storage.releases import current_release

    ws = copy_of(base, tmp_path, "resume")
    runner = RunnerSettings(kind="threads", workers=2)
    encode_flow(model=model, workspace=ws, shard_size=SHARD, batch_size=4, runner=runner)
    ids, vectors, _ = embeddings(ws, model)
    space = Workspace.resolve(ws)
    out = dense_build(space, resolve_model(space, model)).embeddings
    # A run killed after shards 1 and 2: the manifest lists only them, other shard files may exist.
    manifest = read_manifest(out)
    manifest.shards = [s for s in manifest.shards if s.index in (1, 2)]
    manifest.num_passages, manifest.complete = 2 * SHARD, False
    write_manifest(out, manifest)
    (out / "shard-00003.npy").unlink()
    kept = {s.vectors_file: (out / s.vectors_file).stat().st_mtime_ns for s in manifest.shards}

    report = encode_flow(model=model, workspace=ws, shard_size=SHARD, batch_size=4, runner=runner)
    # Shard 0's files, written before the kill for these very passages, are taken as they are.
    assert report.tasks == 2 and report.encoded_now == PASSAGES - 3 * SHARD and not report.noop, report
    # the killed run's tasks had stored the token ids: shard 3 is encoded from them, tokenizing nothing
    assert (report.tokenized, report.tokens_reused) == (0, PASSAGES - 3 * SHARD), report
    assert {f: (out / f).stat().st_mtime_ns for f in kept} == kept  # finished shards were not re-encoded
    again_ids, again_vectors, shards = embeddings(ws, model)
    assert again_ids == ids and again_vectors.tobytes() == vectors.tobytes()
    assert [s.index for s in shards] == [0, 1, 2, 3] and read_manifest(out).complete
    assert encode_flow(model=model, workspace=ws, shard_size=SHARD, batch_size=4, runner=runner).noop

    # A re-index with new passages encodes them on the runner into a new build: the same vectors
    # for the old passages, which the published release now serves.
    extra = space.read_table("passages").slice(0, 1).to_pylist()[0]
    with space.transaction("one-more-passage") as tx:
        tx.write("passages", [{**extra, "passage_id": "extra-1", "source": "extra"}], source="extra")
    release = reindex_flow(
        workspace=ws, model=model, bm25=False, shard_size=SHARD, batch_size=4, runner=runner
    )
    assert (
        release.figures["encoded_passages"] == PASSAGES + 1
        and current_release(space).release == release.release
    )
    [served] = current_release(space).dense
    built = EncodedCorpus(IndexLayout.of(space).root / Path(served.indexes["flat"]).parent / "embeddings")
    assert built.ids().to_pylist() == [*ids, "extra-1"]
    unchanged = 3 * SHARD  # the shards before the one the new passage joins are encoded exactly as before
    assert built.vectors(np.arange(unchanged)).tobytes() == vectors[:unchanged].tobytes()


@pytest.mark.e2e
def test_mapped_mining_equals_the_unmapped_path(base: Path, cluster: str, model: str, tmp_path: Path) -> None:
    from odqa.flows.stages.index import index_build_flow
    from odqa.flows.stages.mine import mine_flow

    indexed = copy_of(base, tmp_path, "indexed")
    index_build_flow(model=model, workspace=indexed)
    negatives, files, reports = {}, {}, {}
    for name, runner in runners(cluster).items():
        ws = copy_of(Path(indexed), tmp_path, f"mine-{name}")
        reports[name] = mine_flow(model=model, dataset="sample", split="dev", depth=20, count=5, workspace=ws,
                                  runner=runner, question_batch=6)  # fmt: skip
        negatives[name] = (
            Workspace.resolve(ws)
            .sql("SELECT question_id, hard_negative_ids FROM questions ORDER BY question_id")
            .to_pylist()
        )
        files[name] = pq.read_table(reports[name].negatives_file)
    reference = negatives["unmapped"]
    assert len(reference) == 20 and sum(len(r["hard_negative_ids"]) for r in reference) > 20
    assert negatives["dask"] == reference
    assert files["dask"].equals(files["unmapped"])
    same = {
        name: {**r.as_dict(), "negatives_file": Path(r.negatives_file).name} for name, r in reports.items()
    }
    assert same["dask"] == same["unmapped"]


# --- issue 33: capacity on the workers, shared clusters, lost workers, one encoding -----------


WATCH = Path(__file__).with_name("dask_shard_watch.py")  # the scheduler's preload: records, loses a worker


@pytest.fixture(scope="module")
def reference(base: Path, model: str, tmp_path_factory) -> tuple[list[str], np.ndarray]:
    """The default runner's embeddings (in process) with shards of `SMALL_SHARD` passages."""
    from odqa.flows.stages.encode import encode_flow

    ws = copy_of(base, tmp_path_factory.mktemp("reference"), "unmapped")
    encode_flow(model=model, workspace=ws, shard_size=SMALL_SHARD, batch_size=4)
    ids, vectors, _ = embeddings(ws, model)
    return ids, vectors


@pytest.fixture(scope="module")
def real_dask(prefect_harness, tmp_path_factory) -> Iterator:
    """A real cluster on 127.0.0.1, as a user starts one: `dask scheduler` (with the
    `dask_shard_watch` preload) and two `dask worker --no-nanny --nthreads 1 --resources GPU=1`
    processes. Shared by the tests (each arms the watch, and a dead worker is replaced first)."""
    from tests.ops.dask_cluster import real_cluster

    with real_cluster(tmp_path_factory.mktemp("real-dask"), preload=WATCH) as cluster:
        yield cluster


def encode_on(cluster, ws: str, model: str, log: Path, shard_size: int = SMALL_SHARD):  # noqa: ANN001, ANN201
    from tests.ops.dask_cluster import odqa_on

    return odqa_on(cluster, log, "-w", ws, "encode", "--model", model, "--shard-size", str(shard_size),
                   "--batch-size", "4")  # fmt: skip


def progress_files(record: Path, *spaces: str) -> list[Path]:
    """What a run on the cluster writes as it goes: the watch record and each workspace's log."""
    return [record, *(Path(ws) / "logs" / "odqa.log" for ws in spaces)]


@pytest.mark.e2e
def test_two_workspaces_share_one_cluster(
    base: Path, model: str, reference, real_dask, tmp_path: Path
) -> None:
    """Two workspaces' `odqa encode`, each in its own process, on one real cluster at once: both
    finish with the default runner's vectors, every shard task asked for one accelerator unit,
    both workers ran shards, and no process logged a lease error (nothing is leased from a
    Prefect server on a cluster)."""
    from tests.ops.dask_cluster import finish

    record = real_dask.watch(tmp_path / "watch.json")
    spaces = {name: copy_of(base, tmp_path, name) for name in ("first", "second")}
    runs = {name: encode_on(real_dask, ws, model, tmp_path / f"{name}.log") for name, ws in spaces.items()}
    try:
        for name, run in runs.items():
            finish(run, tmp_path / f"{name}.log", real_dask, progress_files(record, *spaces.values()))
    finally:  # a failed wait leaves no run behind on the shared cluster
        for run in runs.values():
            if run.poll() is None:
                run.kill()
                run.wait()
    said = "\n".join(p.read_text(errors="replace") for p in [*tmp_path.glob("*.log"), *real_dask.logs.glob("*.log"),
                                                            *progress_files(record, *spaces.values())[1:]])  # fmt: skip
    for ws in spaces.values():
        ids, vectors, shards = embeddings(ws, model)
        assert ids == reference[0] and vectors.tobytes() == reference[1].tobytes()
        assert len(shards) == PASSAGES // SMALL_SHARD
    finished = json.loads(record.read_text())["finished"]
    assert len(finished) == 2 * PASSAGES // SMALL_SHARD and len({f["worker"] for f in finished}) == 2, (
        finished
    )
    assert all(f["asked"] == {"GPU": 1} for f in finished), finished  # capacity is the workers'
    assert not re.search(r"\blease|410 Gone", said, re.IGNORECASE), said[-4000:]  # ("release" is fine)


@pytest.mark.e2e
def test_a_killed_clients_queued_shards_do_not_start(
    base: Path, model: str, real_dask, tmp_path: Path
) -> None:
    """`odqa encode` of 24 one-passage shards on the real cluster, its process SIGKILLed once 3
    shards finished: the scheduler sees the client leave within seconds and sends no shard to a
    worker after that (the 20-odd queued shards never start); the manifest keeps the finished
    shards the client recorded, for the next run to resume after."""
    from odqa.models.searchers.dense import dense_build
    from odqa.pipelines.dense.sharded_encoding import read_manifest
    from odqa.storage.model_registry import resolve_model
    from tests.ops.dask_cluster import LIMIT_S

    record = real_dask.watch(tmp_path / "watch.json")
    ws, log = copy_of(base, tmp_path, "killed-client"), tmp_path / "encode.log"
    run = encode_on(real_dask, ws, model, log, shard_size=1)
    try:
        deadline = time.monotonic() + LIMIT_S
        while not (record.exists() and len(json.loads(record.read_text())["finished"]) >= 3):
            assert run.poll() is None and time.monotonic() < deadline, (
                log.read_text()[-4000:],
                real_dask.log_tails(),
            )
            time.sleep(0.1)
    finally:
        run.kill()
        killed_at = time.time()
        run.wait()
    time.sleep(8)  # time enough for the queued shards to run, were they still wanted
    watch = json.loads(record.read_text())
    [gone] = [at for client, at in watch["clients_gone"] if client.startswith("PrefectDaskClient")]
    assert gone - killed_at < 5, watch
    assert not [at for at in watch["assigned"] if at > gone], watch
    assert 3 <= len(watch["finished"]) < PASSAGES, watch
    space = Workspace.resolve(ws)
    manifest = read_manifest(dense_build(space, resolve_model(space, model)).embeddings)
    assert (
        len(manifest.shards) <= len(watch["finished"]) and not manifest.complete
    )  # what the client recorded


@pytest.mark.e2e
def test_a_lost_worker_costs_only_its_task(
    base: Path, model: str, reference, real_dask, tmp_path: Path
) -> None:
    """`odqa encode` on the real cluster in its own process. Once the run has taken the second
    finished shard, that shard's worker process is SIGKILLed mid-way through its next one. The
    run finishes on the other worker with the default runner's vectors; no finished shard is
    computed again (its result is released once taken), and no shard waits for the lost worker:
    no gap between finished shards after the loss is longer than a shard takes, plus 5 s (the
    issue measured 70 s for a dead task's slot). A hang fails once no process has written
    anything for `STALL_S` (`dask_cluster.finish`). (Last in the module: it leaves a worker
    dead, which the next `watch` would replace.)"""
    from tests.ops.dask_cluster import finish

    record = real_dask.watch(tmp_path / "watch.json", lose_after=2)
    ws, log = copy_of(base, tmp_path, "lost"), tmp_path / "encode.log"
    finish(encode_on(real_dask, ws, model, log), log, real_dask, progress_files(record, ws))
    codes = [w.poll() for w in real_dask.workers]
    assert codes.count(-9) == 1 and codes.count(None) == 1, (codes, real_dask.log_tails())
    watch = json.loads(record.read_text())
    lost, finished = watch["lost"], watch["finished"]
    assert lost is not None and lost["processing"], watch  # killed mid-way through a shard
    keys = [f["key"] for f in finished]
    assert len(keys) == len(set(keys)) == PASSAGES // SMALL_SHARD, keys  # none computed twice
    ids, vectors, shards = embeddings(ws, model)
    assert ids == reference[0] and vectors.tobytes() == reference[1].tobytes()
    assert len(shards) == PASSAGES // SMALL_SHARD
    after = [lost["at"], *(f["at"] for f in finished if f["at"] > lost["at"])]
    longest = max(f["compute"] for f in finished)
    assert len(after) > 1 and max(b - a for a, b in pairwise(after)) <= longest + 5, watch


@pytest.mark.e2e
def test_index_build_keeps_the_shards_encode_made(base: Path, model: str, tmp_path: Path) -> None:
    """`odqa encode --shard-size 2` then `odqa index build` (default shard size): nothing is
    encoded again, the shard files stay as they were."""
    from odqa.flows.stages.encode import encode_flow
    from odqa.flows.stages.index import index_build_flow
    from odqa.models.searchers.dense import dense_build
    from odqa.pipelines.dense.sharded_encoding import read_manifest
    from odqa.storage.model_registry import resolve_model

    ws = copy_of(base, tmp_path, "encode-then-index")
    encode_flow(model=model, workspace=ws, shard_size=2, batch_size=4, dtype="float16")
    space = Workspace.resolve(ws)
    out = dense_build(space, resolve_model(space, model)).embeddings
    written = {p.name: p.stat().st_mtime_ns for p in out.glob("shard-*")}
    assert len(written) == PASSAGES  # 12 shards, two files each
    report = index_build_flow(model=model, workspace=ws)
    assert report.vectors == PASSAGES
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("shard-*")} == written
    manifest = read_manifest(out)
    assert manifest.shard_size == 2 and manifest.dtype == "float16" and manifest.complete
