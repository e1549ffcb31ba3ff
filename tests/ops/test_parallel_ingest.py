"""Ingest parsing as a data-parallel stage: chunks cleaned as Prefect tasks on the flow's task
runner (threads, a Dask cluster) give the same rows, in the same order, as the local process
pool, and an ingest that failed mid-way on the task runner resumes from its staged chunks."""

from __future__ import annotations

from pathlib import Path

import pytest

from odqa.flows.plumbing.sample_data import SAMPLE_DUMP
from odqa.flows.plumbing.task_runners import DASK_ADDRESS_ENV, RunnerSettings
from odqa.pipelines.wikipedia.dump_reader import iter_pages
from odqa.storage import Workspace

TABLES = ("articles", "passages", "category_links")
CHUNK_PAGES = 20  # the 182-page sample in 10 chunks, so order across chunks is tested


def _rows(ws_dir: Path) -> dict[str, list[dict]]:
    ws = Workspace.resolve(ws_dir)
    return {table: ws.read_table(table).to_pylist() for table in TABLES}


@pytest.fixture(scope="module")
def reference(prefect_harness, tmp_path_factory) -> dict[str, list[dict]]:
    """The sample ingested on the default path (no runner: the local cleaning pool)."""
    from odqa.flows.stages.wikipedia import ingest_wikipedia_flow

    ws_dir = tmp_path_factory.mktemp("reference") / "ws"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(DASK_ADDRESS_ENV, raising=False)
        report = ingest_wikipedia_flow(dump=str(SAMPLE_DUMP), workspace=str(ws_dir), chunk_pages=CHUNK_PAGES)
    assert report.rows["articles"] == 182 and report.rows["passages"] > 100
    assert report.cleaned_on.startswith("local process pool")
    rows = _rows(ws_dir)
    assert [r["article_id"] for r in rows["articles"]] == [p.page_id for p in iter_pages(SAMPLE_DUMP)]
    return rows


def test_where_chunks_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """No runner: the local pool; a runner or a cluster address: that task runner."""
    from prefect.task_runners import ProcessPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    from odqa.flows.plumbing.task_runners import mapping_runner

    monkeypatch.delenv(DASK_ADDRESS_ENV, raising=False)
    assert mapping_runner(None) is None
    assert isinstance(mapping_runner(RunnerSettings(kind="processes", workers=2)).task_runner(), ProcessPoolTaskRunner)
    by_parameter = mapping_runner(RunnerSettings(dask_address="tcp://10.0.0.5:8786")).task_runner()
    assert isinstance(by_parameter, DaskTaskRunner) and by_parameter.address == "tcp://10.0.0.5:8786"
    monkeypatch.setenv(DASK_ADDRESS_ENV, "tcp://10.0.0.6:8786")
    by_environment = mapping_runner(None).task_runner()
    assert isinstance(by_environment, DaskTaskRunner) and by_environment.address == "tcp://10.0.0.6:8786"


@pytest.mark.e2e
def test_chunks_on_a_local_dask_cluster_equal_the_default_runner(
    reference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same call as the reference; only $ODQA_DASK_ADDRESS differs, naming the cluster."""
    from distributed import LocalCluster

    from odqa.flows.stages.wikipedia import ingest_wikipedia_flow

    ws_dir = tmp_path / "ws"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        monkeypatch.setenv(DASK_ADDRESS_ENV, cluster.scheduler_address)
        report = ingest_wikipedia_flow(dump=str(SAMPLE_DUMP), workspace=str(ws_dir), chunk_pages=CHUNK_PAGES)
        cleaned_on_cluster = cluster.scheduler.task_prefixes["clean_chunk_task"].state_counts["memory"]
    assert cleaned_on_cluster == 10  # every chunk went to the cluster's workers
    assert report.resumed_chunks == 0 and report.rows["articles"] == 182
    assert report.cleaned_on == f"dask {cluster.scheduler_address}"
    assert _rows(ws_dir) == reference


@pytest.mark.e2e
def test_failed_ingest_on_the_thread_runner_resumes_to_identical_rows(
    reference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk task fails (as on a lost worker); the re-run takes over the chunks written before it."""
    import odqa.flows.stages.wikipedia as wikipedia

    real = wikipedia.process_chunk

    def fail_on_chunk_5(pages, options, index):
        if index == 5:
            raise RuntimeError("worker lost on chunk 5")
        return real(pages, options, index)

    ws_dir = tmp_path / "ws"
    runner = {"kind": "threads", "workers": 2}
    kwargs = {"dump": str(SAMPLE_DUMP), "workspace": str(ws_dir), "chunk_pages": CHUNK_PAGES, "runner": runner}
    monkeypatch.setattr(wikipedia, "process_chunk", fail_on_chunk_5)
    with pytest.raises(RuntimeError, match="worker lost on chunk 5"):
        wikipedia.ingest_wikipedia_flow(**kwargs)
    assert Workspace.resolve(ws_dir).rows("articles") == 0  # nothing half-visible
    monkeypatch.setattr(wikipedia, "process_chunk", real)
    report = wikipedia.ingest_wikipedia_flow(**kwargs)
    assert report.resumed_chunks == 5  # chunks 0-4 were written in order before chunk 5 failed
    assert _rows(ws_dir) == reference
