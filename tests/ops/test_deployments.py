"""prefect.yaml has a deployment for every verb a user runs, none of them with a default that
names the sample's data or that a cleared form field could not clear; `prefect deploy --all`
against a real local server creates every deployment of prefect.yaml,
a deployment run triggered through the API is picked up by the process worker and completes, and
the server's scheduler creates the weekly re-index runs (Sundays 03:00 UTC) from the deployed cron
schedule. (A second re-index while one runs is refused by its lock: tests/ops/test_reindex.py.)"""

from __future__ import annotations

import inspect
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from odqa.flows.plumbing.sample_data import SAMPLE_DUMP
from odqa.flows.plumbing.server import REPO_ROOT, local_prefect
from odqa.storage import Workspace

SCHEDULER_LOOP_ENV = "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS"
FLOW_NAMES = {
    "odqa.flows.stages.wikipedia:ingest_wikipedia_flow": "ingest-wikipedia",
    "odqa.flows.stages.passages:import_passages_flow": "import-passages",
    "odqa.flows.stages.questions:import_questions_flow": "import-questions",
    "odqa.flows.compositions.fetch:fetch_flow": "fetch",
    "odqa.flows.compositions.reproduce:reproduce_flow": "reproduce",
    "odqa.flows.stages.holdout:holdout_flow": "holdout",
    "odqa.flows.stages.bm25:bm25_index_flow": "bm25-index",
    "odqa.flows.stages.negatives:bm25_negatives_flow": "negatives-bm25",
    "odqa.flows.stages.positives:derive_positives_flow": "positives",
    "odqa.flows.stages.mine:mine_flow": "mine-negatives",
    "odqa.flows.stages.index:index_build_flow": "dense-index-build",
    "odqa.flows.stages.retrieve:retrieve_flow": "retrieve",
    "odqa.flows.stages.tune_hybrid:tune_hybrid_flow": "tune-hybrid",
    "odqa.flows.stages.categories:label_domains_flow": "label-domains",
    "odqa.flows.stages.questions:trex_questions_flow": "questions-trex",
    "odqa.flows.stages.train:train_flow": "train",
    "odqa.flows.compositions.recipe:train_rounds_flow": "train-rounds",
    "odqa.flows.compositions.experiments:dual_encoders_experiment_flow": "experiment-dual-encoders",
    "odqa.flows.compositions.experiments:taser_experiment_flow": "experiment-taser",
    "odqa.flows.stages.evaluate:evaluate_flow": "evaluate",
    "odqa.flows.compositions.pipeline:odqa_pipeline": "odqa-pipeline",
    "odqa.flows.compositions.reindex:reindex_flow": "reindex",
    "odqa.flows.stages.release_rollback:release_rollback_flow": "release-rollback",
}


def test_prefect_yaml_has_a_deployment_per_flow_and_a_scheduled_reindex() -> None:
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    deployments = {d["name"]: d for d in spec["deployments"]}
    assert set(deployments) == {"ingest", "import-passages", "import-questions", "fetch", "holdout", "label", "questions",
                                "bm25-index", "negatives", "positives", "train", "mine", "index-build", "retrieve",
                                "evaluate", "tune-hybrid",
                                "train-rounds", "experiment-dual-encoders", "experiment-taser", "pipeline", "reproduce",
                                "reindex", "release-rollback"}  # fmt: skip
    assert {d["entrypoint"] for d in deployments.values()} == set(FLOW_NAMES)
    assert all(d["work_pool"]["name"] == "odqa-process" for d in deployments.values())
    assert deployments["reindex"]["schedules"][0]["cron"]
    assert deployments["reindex"]["concurrency_limit"]["limit"] == 1


SAMPLE_DATA = re.compile(r"sample/|trex|squad|nq-|enwiki|toy", re.IGNORECASE)


def test_no_deployment_defaults_to_sample_data_or_to_a_value_a_cleared_field_cannot_clear() -> None:
    """A form field the user clears is left out of the run's parameters (Prefect 3.8.8's UI sends
    no key, checked in tests/ops/test_prefect_ui_project.py), and the server then fills it from
    the deployment's parameters: so a deployment sets no parameter whose flow default is None
    (empty has a meaning there), and no default, in prefect.yaml or in a flow's signature, names
    the sample's files or datasets. `pipeline` is the sample's own pipeline and exempt."""
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameter_schema

    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    for deployment in spec["deployments"]:
        if deployment["name"] == "pipeline":
            continue
        flow = load_flow_from_entrypoint(deployment["entrypoint"])
        signature = inspect.signature(flow.fn).parameters
        for name, value in (deployment.get("parameters") or {}).items():
            assert not SAMPLE_DATA.search(json.dumps(value)), (deployment["name"], name, value)
            assert signature[name].default is not None, f"{deployment['name']}: {name} is optional, set in prefect.yaml"
        schema = parameter_schema(flow).model_dump()
        models = [m.get("properties") or {} for m in (schema.get("definitions") or {}).values()]
        for prop in [*schema["properties"].values(), *(p for m in models for p in m.values())]:
            assert not SAMPLE_DATA.search(json.dumps(prop.get("default"))), (deployment["name"], prop)


def test_the_train_form_offers_the_choices_of_the_settings() -> None:
    """The `train` deployment's parameter schema (what its Custom run form shows, as deployed by
    `deploy_typed_forms`): arch, amp and objective are dropdowns, every field has its description
    from models/settings.py, and `resume` is a choice, not a tri-state whose null the form shows as
    'Property is type "None"'."""
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameter_schema

    from odqa.flows.plumbing.deployment_forms import typed_form
    from odqa.models.config import ARCHS

    schema = typed_form(parameter_schema(load_flow_from_entrypoint("odqa.flows.stages.train:train_flow")).model_dump())
    models = schema["definitions"]
    retriever, training = models["RetrieverSettings"]["properties"], models["TrainSettings"]["properties"]
    assert retriever["arch"]["enum"] == list(ARCHS)
    assert training["amp"]["enum"] == ["auto", "bf16", "fp16", "none"]
    assert training["objective"]["enum"] == ["contrastive", "stopgrad", "flipped"]
    assert all(p.get("description") for p in [*retriever.values(), *training.values()])
    resume = schema["properties"]["resume"]
    assert resume["enum"] == ["auto", "continue", "restart"] and resume["default"] == "auto"
    assert "anyOf" not in resume


async def _deployed_names() -> set[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import DeploymentSort

    async with get_client() as client:
        deployments = await client.read_deployments(limit=200, offset=0, sort=DeploymentSort.NAME_ASC)
        names = {f"{(await client.read_flow(d.flow_id)).name}/{d.name}" for d in deployments}
        return names


async def _scheduled_runs(client, deployment_id, timeout: float) -> list:
    """The deployment's Scheduled runs, once the scheduler has made at least its minimum (3)."""
    import asyncio
    import time

    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    deadline = time.monotonic() + timeout
    while True:
        runs = await client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
            ),
            sort=FlowRunSort.EXPECTED_START_TIME_ASC,
            limit=200,  # the 3.8.8 server rejects the client's default limit=None (HTTP 422)
        )
        if len(runs) >= 3 or time.monotonic() > deadline:
            return runs
        await asyncio.sleep(1)


async def _reindex_schedule(timeout: float) -> tuple[object, list, list]:
    """The deployed `reindex`, its scheduled runs, and the runs the scheduler loop makes again
    after those are deleted (so the server's scheduler service itself is shown working)."""
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        deployment = await client.read_deployment_by_name("reindex/reindex")
        first = await _scheduled_runs(client, deployment.id, timeout)
        for run in first:
            await client.delete_flow_run(run.id)
        again = await _scheduled_runs(client, deployment.id, timeout)
        return deployment, first, again


def _assert_weekly_on_sundays_at_3_utc(runs: list) -> None:
    assert len(runs) >= 3, f"the scheduler created {len(runs)} scheduled reindex runs"
    starts = [run.expected_start_time.astimezone(UTC) for run in runs]
    assert all((t.weekday(), t.hour, t.minute, t.second) == (6, 3, 0, 0) for t in starts), starts
    assert all(later - earlier == timedelta(days=7) for earlier, later in zip(starts, starts[1:], strict=False))
    now = datetime.now(UTC)
    assert now < starts[0] <= now + timedelta(days=7)  # the next Sunday 03:00, none skipped
    assert all(run.state.name == "Scheduled" and run.auto_scheduled for run in runs)
    assert all(run.parameters.get("wait_seconds") == 3600 for run in runs)


def _assert_weekly_reindex(deployment, first: list, again: list) -> None:
    assert [(s.active, s.schedule.cron, str(s.schedule.timezone)) for s in deployment.schedules] == [
        (True, "0 3 * * 0", "UTC")
    ]
    assert not deployment.paused
    assert deployment.global_concurrency_limit.limit == 1  # overlapping runs: the second one waits
    assert deployment.concurrency_options.collision_strategy.value == "ENQUEUE"
    _assert_weekly_on_sundays_at_3_utc(first)
    _assert_weekly_on_sundays_at_3_utc(again)
    assert not {r.id for r in first} & {r.id for r in again}  # new runs, made by the scheduler loop


@pytest.mark.e2e
def test_deploy_all_then_run_a_deployment_to_completion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    ws = tmp_path / "ws"
    monkeypatch.setenv(SCHEDULER_LOOP_ENV, "3")  # the server's scheduler loop: every 3 s, not 60 s
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    expected = {f"{FLOW_NAMES[d['entrypoint']]}/{d['name']}" for d in spec["deployments"]}
    with local_prefect(home=tmp_path / "prefect-home", log_dir=tmp_path / "logs", startup_timeout=300) as running, \
            temporary_settings({PREFECT_API_URL: running.api_url}):
        assert asyncio.run(_deployed_names()) == expected
        flow_run = run_deployment("ingest-wikipedia/ingest", parameters={"workspace": str(ws), "dump": str(SAMPLE_DUMP)},
                                  timeout=420, poll_interval=3)
        logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in (tmp_path / "logs").glob("*.log"))
        assert flow_run.state is not None and flow_run.state.is_completed(), (flow_run.state, logs)
        # the form's bounds (flows.plumbing.bounds) are the server's: no run is made of keep: 0
        with pytest.raises(Exception, match="0 is less than the minimum of 1"):
            run_deployment("reindex/reindex", parameters={"workspace": str(ws), "keep": 0}, timeout=0)
        _assert_weekly_reindex(*asyncio.run(_reindex_schedule(timeout=90)))
    assert Workspace.resolve(ws).rows("passages") == 150
