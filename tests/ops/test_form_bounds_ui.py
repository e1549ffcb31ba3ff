"""In a real headless browser: the re-index deployment's Custom run form refuses `keep: 0` with
the bound its flow's signature states (`flows.plumbing.bounds`), and no run is made."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request

import pytest

from odqa.flows.plumbing.server import POOL, create_process_pool, prefect, prefect_env
from tests.browser import ARTIFACTS, headless_chromium

UI_TIMEOUT_S = 90
REFUSED = "Validation failed for field 'keep'. Failure reason: 0 is less than the minimum of 1"


def _kept_by_runs(deployment_id: str) -> list[object]:
    """The `keep` of every run of the deployment (its schedule's too), as Prefect's server has them."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.sorting import FlowRunSort

    async def runs() -> list[object]:
        async with get_client() as client:
            found = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])), limit=200,
                sort=FlowRunSort.ID_DESC)  # fmt: skip
            return [run.parameters.get("keep") for run in found]

    return asyncio.run(runs())


def _delete(deployment_id: str) -> None:
    """Leave the session's server without this deployment (and its weekly schedule's runs)."""
    from prefect.client.orchestration import get_client

    async def delete() -> None:
        async with get_client() as client:
            await client.delete_deployment(deployment_id)

    asyncio.run(delete())


@pytest.mark.e2e
def test_the_reindex_form_refuses_keep_zero_and_makes_no_run(prefect_harness: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    create_process_pool(prefect_harness, None, POOL)
    prefect(["--no-prompt", "deploy", "--name", "reindex"], prefect_env(prefect_harness))
    with urllib.request.urlopen(f"{prefect_harness}/deployments/name/reindex/reindex", timeout=30) as response:
        deployment = json.load(response)
    try:
        assert deployment["parameter_openapi_schema"]["properties"]["keep"]["minimum"] == 1
        with headless_chromium(window="1400,4200") as browser:
            wait = WebDriverWait(browser, UI_TIMEOUT_S)
            browser.get(f"{prefect_harness.removesuffix('/api')}/deployments/deployment/{deployment['id']}/run")
            keep = wait.until(ec.presence_of_element_located((By.XPATH,
                "//label[normalize-space(.)='keep (Optional)']/ancestor::*[.//input[@type='number']][1]"
                "//input[@type='number']")))  # fmt: skip
            assert keep.get_attribute("value") == "3"
            keep.send_keys(Keys.CONTROL, "a")
            keep.send_keys("0", Keys.TAB)
            browser.find_element(By.XPATH, "//button[normalize-space(.)='Submit']").click()
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            try:
                wait.until(lambda b: REFUSED in re.sub(r"\s+", " ", b.find_element(By.TAG_NAME, "body").text))
            finally:
                browser.save_screenshot(str(ARTIFACTS / "prefect-reindex-form-bounds.png"))
            assert browser.current_url.endswith("/run")  # still on the form, not on a new run's page
        assert 0 not in _kept_by_runs(deployment["id"])
    finally:
        _delete(deployment["id"])
