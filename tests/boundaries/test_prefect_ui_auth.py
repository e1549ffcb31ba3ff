"""Issue 28: with ``ODQA_PREFECT_AUTH=on`` the Prefect UI, in a real (headless) browser, shows no
data until the auth string is given on its login page; then it shows the deployments."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from odqa.flows.backend.auth import AUTH_ENV, api_client, client_auth_string
from odqa.flows.backend.local_server import temporary_server
from tests.browser import ARTIFACTS, headless_chromium

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
UI_TIMEOUT_S = 120  # the UI's first load takes over a minute on a loaded 2-core machine
DEPLOYMENT = "auth-probe-deployment"


async def _deploy(api_url: str, auth: str) -> None:
    async with api_client(api_url, auth) as client:
        flow_id = await client.create_flow_from_name("odqa-auth-probe")
        await client.create_deployment(flow_id=flow_id, name=DEPLOYMENT)


def test_the_ui_needs_the_auth_string_and_then_shows_the_deployments(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    monkeypatch.setenv(AUTH_ENV, "on")
    with temporary_server(tmp_path / "home", tmp_path / "server.log", label="uiauth") as server:
        auth = client_auth_string(tmp_path / "home")
        assert auth is not None
        asyncio.run(_deploy(server.api_url, auth))
        ui = server.api_url.removesuffix("/api")
        with headless_chromium() as browser:
            wait = WebDriverWait(browser, UI_TIMEOUT_S)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            browser.get(f"{ui}/deployments")
            try:
                secret = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "input[type=password]")))
            finally:
                browser.save_screenshot(str(ARTIFACTS / "prefect-ui-auth-login.png"))
            assert DEPLOYMENT not in browser.find_element(By.TAG_NAME, "body").text  # no data without it

            secret.send_keys("odqa:wrong")
            browser.find_element(By.XPATH, "//button[normalize-space()='Login']").click()
            wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "body"), "Authentication failed"))
            assert DEPLOYMENT not in browser.find_element(By.TAG_NAME, "body").text

            secret = browser.find_element(By.CSS_SELECTOR, "input[type=password]")
            secret.clear()
            secret.send_keys(auth)
            browser.find_element(By.XPATH, "//button[normalize-space()='Login']").click()
            browser.get(f"{ui}/deployments")
            try:
                wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "body"), DEPLOYMENT))
            finally:
                browser.save_screenshot(str(ARTIFACTS / "prefect-ui-auth-deployments.png"))
            page = re.sub(r"\s+", " ", browser.find_element(By.TAG_NAME, "body").text)
            assert "odqa-auth-probe" in page and not browser.find_elements(
                By.CSS_SELECTOR, "input[type=password]"
            )
