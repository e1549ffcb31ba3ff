"""A data-parallel stage (BM25 retrieval in mapped question batches) gives the same run on the
default thread runner and on a Dask cluster reached by its address."""

from __future__ import annotations

from pathlib import Path

import pytest

from odqa.flows.plumbing.sample_data import SAMPLE_DIR, SAMPLE_DUMP
from odqa.flows.plumbing.task_runners import RunnerSettings, make_task_runner
from odqa.pipelines.retrieval.java import JavaMissingError, check_java


def test_runner_choice() -> None:
    from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    assert isinstance(make_task_runner(), ThreadPoolTaskRunner)
    assert isinstance(make_task_runner("processes", workers=2), ProcessPoolTaskRunner)
    assert isinstance(make_task_runner("threads", address="tcp://127.0.0.1:8786"), DaskTaskRunner)
    with pytest.raises(ValueError, match="threads, processes or dask"):
        make_task_runner("gpus")  # type: ignore[arg-type]


def test_a_dask_address_wins_over_a_client_the_process_already_holds() -> None:
    """prefect-dask's runner takes `distributed.get_client()` first: a process holding a client of
    one cluster sent the tasks of a flow pointed at another cluster to the one it held."""
    from distributed import Client, LocalCluster, get_worker

    options = {"n_workers": 1, "threads_per_worker": 1, "processes": False, "dashboard_address": ":0",
               "protocol": "tcp://", "host": "127.0.0.1"}  # fmt: skip
    with LocalCluster(**options) as held, LocalCluster(**options) as named, Client(held):
        runner = make_task_runner(address=named.scheduler_address)
        with runner:
            assert runner.client.scheduler.address == named.scheduler_address
            ran_on = runner.client.submit(lambda: get_worker().address, pure=False).result(timeout=60)
        assert ran_on in named.scheduler_info["workers"] and ran_on not in held.scheduler_info["workers"]


@pytest.mark.e2e
def test_bm25_batches_on_a_local_dask_cluster_equal_the_default_runner(prefect_harness, tmp_path: Path) -> None:
    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"BM25 needs a JDK: {error}")
    from distributed import LocalCluster

    from odqa.flows.stages.bm25 import bm25_index_flow
    from odqa.flows.stages.questions import import_questions_flow
    from odqa.flows.stages.retrieve import retrieve_flow
    from odqa.flows.stages.wikipedia import ingest_wikipedia_flow
    from odqa.storage import Workspace

    ws = str(tmp_path / "ws")
    ingest_wikipedia_flow(dump=str(SAMPLE_DUMP), workspace=ws)
    import_questions_flow(fmt="nq-open", path=str(SAMPLE_DIR / "qa" / "nq-sample.jsonl"), dataset="nq", split="test",
                          workspace=ws)
    bm25_index_flow(workspace=ws, threads=1)
    common = {"dataset": "nq", "split": "test", "k": 20, "workspace": ws}
    local = retrieve_flow(runner=RunnerSettings(kind="threads", bm25_batch=8), run="bm25-threads", **common)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        dask = retrieve_flow(runner=RunnerSettings(kind="dask", dask_address=cluster.scheduler_address, bm25_batch=8),
                             run="bm25-dask", **common)
    assert local.batches == dask.batches == 4 and local.rows == dask.rows > 0
    rows = {run: Workspace.resolve(ws).sql(
        f"SELECT question_id, passage_id, rank, score FROM runs WHERE run = '{run}' ORDER BY question_id, rank"
    ).to_pylist() for run in ("bm25-threads", "bm25-dask")}
    assert rows["bm25-threads"] == rows["bm25-dask"]
    assert len({r["question_id"] for r in rows["bm25-dask"]}) == 31


def test_cli_runner_options_name_settings_only_when_given() -> None:
    from odqa.flows.cli.runner_options import runner_settings

    assert runner_settings(None, None, None) is None
    assert runner_settings("processes", 3, None).model_dump() == {
        "kind": "processes", "workers": 3, "dask_address": None, "bm25_batch": 64}
    on_cluster = runner_settings(None, None, "tcp://127.0.0.1:8786")
    assert on_cluster.kind == "dask" and on_cluster.dask_address == "tcp://127.0.0.1:8786"
    assert runner_settings(None, 2, None).kind == "threads"


def test_runner_descriptions_name_where_tasks_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from odqa.flows.plumbing.task_runners import DASK_ADDRESS_ENV, RunnerSettings

    monkeypatch.delenv(DASK_ADDRESS_ENV, raising=False)
    assert RunnerSettings(kind="processes", workers=3).describe() == "processes (3 workers)"
    assert RunnerSettings(kind="dask").describe() == "dask local cluster (2 workers)"
    assert RunnerSettings(dask_address="tcp://10.0.0.5:8786").describe() == "dask tcp://10.0.0.5:8786"
    monkeypatch.setenv(DASK_ADDRESS_ENV, "tcp://10.0.0.6:8786")
    assert RunnerSettings().describe() == "dask tcp://10.0.0.6:8786"
