"""`prefect deploy --all` against a real local server creates every deployment of prefect.yaml,
and a deployment run triggered through the API is picked up by the process worker and completes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.sample_data import SAMPLE_DUMP
from flows.server import REPO_ROOT, local_prefect
from storage import Workspace

FLOW_NAMES = {
    "flows/wikipedia.py:ingest_wikipedia_flow": "ingest-wikipedia",
    "flows/categories.py:label_domains_flow": "label-domains",
    "flows/questions.py:trex_questions_flow": "questions-trex",
    "flows/training.py:train_flow": "train",
    "flows/evaluation.py:evaluate_flow": "evaluate",
    "flows/pipeline.py:odqa_pipeline": "odqa-pipeline",
    "flows/reindex.py:reindex_flow": "reindex",
}


def test_prefect_yaml_has_a_deployment_per_flow_and_a_scheduled_reindex() -> None:
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    deployments = {d["name"]: d for d in spec["deployments"]}
    assert set(deployments) == {"ingest", "label", "questions", "train", "evaluate", "pipeline", "reindex"}
    assert {d["entrypoint"] for d in deployments.values()} == set(FLOW_NAMES)
    assert all(d["work_pool"]["name"] == "odqa-process" for d in deployments.values())
    assert deployments["reindex"]["schedules"][0]["cron"]
    assert deployments["reindex"]["concurrency_limit"]["limit"] == 1


async def _deployed_names() -> set[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import DeploymentSort

    async with get_client() as client:
        deployments = await client.read_deployments(limit=200, offset=0, sort=DeploymentSort.NAME_ASC)
        names = {f"{(await client.read_flow(d.flow_id)).name}/{d.name}" for d in deployments}
        gpu = await client.read_concurrency_limit_by_tag("gpu")
        assert gpu.concurrency_limit >= 1
        return names


@pytest.mark.e2e
def test_deploy_all_then_run_a_deployment_to_completion(tmp_path: Path) -> None:
    import asyncio

    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    ws = tmp_path / "ws"
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    expected = {f"{FLOW_NAMES[d['entrypoint']]}/{d['name']}" for d in spec["deployments"]}
    with local_prefect(home=tmp_path / "prefect-home", log_dir=tmp_path / "logs", startup_timeout=300) as running, \
            temporary_settings({PREFECT_API_URL: running.api_url}):
        assert asyncio.run(_deployed_names()) == expected
        flow_run = run_deployment("ingest-wikipedia/ingest", parameters={"workspace": str(ws), "dump": str(SAMPLE_DUMP)},
                                  timeout=420, poll_interval=3)
        logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in (tmp_path / "logs").glob("*.log"))
        assert flow_run.state is not None and flow_run.state.is_completed(), (flow_run.state, logs)
    assert Workspace.resolve(ws).rows("passages") == 150
