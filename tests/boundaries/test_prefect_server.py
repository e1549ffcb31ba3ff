"""Issue 28: the Prefect server the project starts is closed to other web pages. A page the user
happens to open cannot start a deployment through it (no CORS grant to foreign origins, CSRF
protection on), while the project's own clients (flows, CLI, worker) still run flows.

Runs against the session's server, started as every project server is (`flows.backend.local_server`)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid

import pytest

EVIL = "http://evil.example"


def _call(url: str, method: str = "GET", body: dict | None = None, **headers: str) -> tuple[int, dict, str]:
    """(status, headers, text) of one plain HTTP request, as a browser page would send it."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **headers})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, {k.lower(): v for k, v in reply.headers.items()}, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode()


async def _deployment_and_runs(api_url: str, deployment_id: str | None = None) -> tuple[str, int]:
    """A deployment of a probe flow (created through the project's client when `deployment_id` is
    None) and how many flow runs it has."""
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.sorting import FlowRunSort

    async with PrefectClient(api_url) as client:
        if deployment_id is None:
            flow_id = await client.create_flow_from_name(f"boundary-probe-{uuid.uuid4().hex[:8]}")
            deployment_id = str(await client.create_deployment(flow_id=flow_id, name="probe"))
        runs = await client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                                           sort=FlowRunSort.ID_DESC, limit=200)  # 3.8.8 refuses sort=None  # fmt: skip
    return deployment_id, len(runs)


@pytest.fixture(scope="module")
def deployment(prefect_harness: str) -> str:
    return asyncio.run(_deployment_and_runs(prefect_harness))[0]


def test_a_foreign_page_cannot_create_a_flow_run(prefect_harness: str, deployment: str) -> None:
    url = f"{prefect_harness}/deployments/{deployment}/create_flow_run"
    status, headers, text = _call(url, "POST", {}, Origin=EVIL)
    assert status == 403 and "CSRF" in text, (status, text[:300])
    assert headers.get("access-control-allow-origin") in (None, "*") or EVIL not in headers["access-control-allow-origin"]
    # text/plain skips the browser's preflight: still refused
    status, _, text = _call(url, "POST", {}, Origin=EVIL, **{"Content-Type": "text/plain"})
    assert status == 403, (status, text[:300])
    assert asyncio.run(_deployment_and_runs(prefect_harness, deployment))[1] == 0, "a flow run was created"


def test_foreign_origins_get_no_cors_grant(prefect_harness: str) -> None:
    status, headers, _ = _call(f"{prefect_harness}/flows/filter", "OPTIONS", Origin=EVIL,
                               **{"Access-Control-Request-Method": "POST",
                                  "Access-Control-Request-Headers": "content-type"})  # fmt: skip
    assert status >= 400 and "access-control-allow-origin" not in headers, (status, headers)
    _, headers, _ = _call(f"{prefect_harness}/csrf-token?client=probe", Origin=EVIL)
    assert "access-control-allow-origin" not in headers, "a foreign page could read a CSRF token"
    own = prefect_harness.removesuffix("/api")
    _, headers, _ = _call(f"{prefect_harness}/health", Origin=own)
    assert headers.get("access-control-allow-origin") == own, "the UI's own origin lost its grant"


def test_the_projects_clients_still_create_and_run_flows(prefect_harness: str, deployment: str) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client

    @flow(name="boundary-probe-run")
    def probe(x: int) -> int:
        return x + 1

    assert probe(1) == 2  # a flow run reported to the server (CSRF-protected writes)

    async def from_deployment() -> str:
        async with get_client() as client:
            return str((await client.create_flow_run_from_deployment(deployment)).id)

    asyncio.run(from_deployment())
    assert asyncio.run(_deployment_and_runs(prefect_harness, deployment))[1] == 1
