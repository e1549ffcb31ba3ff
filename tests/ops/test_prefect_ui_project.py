"""A project on the user's own data, run from the Prefect UI in a real headless browser, beginning
with an empty workspace: passages and questions imported through their deployments (a run's log
shows its report as `key: value` lines, as the CLI prints it; `fmt` is a dropdown of the CLI's
formats), a model trained from the `train` Custom run form (its architecture picked from a
dropdown with no preset, `dev` typed and then cleared: the run gets no `dev` at all, so no sample
dev set sneaks back in), its artifact showing the loss plot with a point at every step the run's
log shows a loss for, and the scheduled `reindex` deployment, quick-run from its page after a new
passages file landed in the workspace's incoming/ folder, publishing a new release and logging
what it looked at.

What the 3.8.8 UI submits for a cleared field was checked here: nothing (the key is left out),
so the server fills it from the deployment's own parameters; prefect.yaml therefore sets no
optional parameter (tests/ops/test_deployments.py checks that)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import urllib.request
from pathlib import Path

import pytest

from odqa.flows.plumbing.server import (
    POOL,
    LocalPrefect,
    create_process_pool,
    prefect,
    prefect_env,
    start_worker,
)
from tests.browser import ARTIFACTS, headless_chromium
from tests.experiments.tiny_encoder import write_tiny_encoder
from tests.ops.input_files import PASSAGES, write_passages

UI_TIMEOUT_S = 60
RUN_TIMEOUT_S = 240
DEPLOYMENTS = ("import-passages", "import-questions", "train", "reindex")
TRAIN_STEPS = 3
LOGGED_LOSS = re.compile(r"train \S+: (\d+)/\d+ step .*\bloss=")
QUESTIONS = [("What is the longest river of Zorbania?", "Quellor", "1"),
             ("What is the capital of Vexland?", "Morvil", "2"),
             ("Which composer wrote the opera Glass Tides?", "Ilsa Brandt", "3"),
             ("What is Farnwick known for?", "copper mines", "4")]  # fmt: skip
NEW_PASSAGES = [("6", "Quellor river floods every spring near Zorbania's capital.", "Quellor")]


def _write_dpr_json(path: Path) -> Path:
    texts = {pid: (text, title) for pid, text, title in PASSAGES}
    path.write_text(json.dumps([{"question": q, "answers": [a], "negative_ctxs": [], "hard_negative_ctxs": [],
                                 "positive_ctxs": [{"passage_id": pid, "text": texts[pid][0], "title": texts[pid][1]}]}
                                for q, a, pid in QUESTIONS]), encoding="utf-8")  # fmt: skip
    return path


def _field(browser, name: str, tag: str = "textarea"):
    """The input of the form property labelled `name` (the label reads 'name' or 'name (Optional)')."""
    from selenium.webdriver.common.by import By

    return browser.find_element(By.XPATH, f"{_property(name)}//{tag}")


def _property(name: str) -> str:
    """The form property labelled `name`: the nearest property around its label (a settings
    group, e.g. `training`, is a property holding its fields' properties)."""
    return (f"(//span[contains(@class, 'schema-form-property__label') and "
            f"(normalize-space()='{name}' or normalize-space()='{name} (Optional)')]"
            f"/ancestor::div[contains(concat(' ', normalize-space(@class), ' '), ' schema-form-property ')][1])")  # fmt: skip


def _type(element, text: str) -> None:
    from selenium.webdriver.common.keys import Keys

    element.send_keys(Keys.CONTROL + "a", Keys.BACK_SPACE)
    if text:
        element.send_keys(text)


async def _runs_of(deployment_id: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.sorting import FlowRunSort

    async with get_client() as client:
        return await client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                                           sort=FlowRunSort.EXPECTED_START_TIME_DESC, limit=20, offset=0)  # fmt: skip


def _finished(deployment_id: str, known: set, logs: Path, timeout: float = RUN_TIMEOUT_S):
    """The deployment's new flow run (not in `known`) once it is final; fails with the worker's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [run for run in asyncio.run(_runs_of(deployment_id)) if run.id not in known]
        if new and new[0].state is not None and new[0].state.is_final():
            worker = logs.read_text(errors="replace")[-4000:] if logs.is_file() else ""
            assert new[0].state.is_completed(), (new[0].name, new[0].state, worker)
            return new[0]
        time.sleep(1)
    raise AssertionError(f"no finished run of deployment {deployment_id} in {timeout} s")


async def _run_logs(flow_run_id) -> str:
    from prefect.client.orchestration import get_client

    messages: list[str] = []
    async with get_client() as client:
        while True:  # the server answers at most 200 lines a call
            response = await client._client.post("/logs/filter", json={
                "logs": {"flow_run_id": {"any_": [str(flow_run_id)]}}, "limit": 200, "offset": len(messages),
                "sort": "TIMESTAMP_ASC"})  # fmt: skip
            response.raise_for_status()
            page = [entry["message"] for entry in response.json()]
            messages += page
            if len(page) < 200:
                return "\n".join(messages)


def _logs_showing(flow_run_id, pattern: str, seconds: float = 60) -> str:
    """The run's logs once they show ``pattern`` (or after ``seconds``): the flow's process sends
    its last lines in a batch that may reach the server after the run's state turned Completed."""
    deadline = time.monotonic() + seconds
    while True:
        text = asyncio.run(_run_logs(flow_run_id))
        if re.search(pattern, text) or time.monotonic() > deadline:
            return text
        time.sleep(1)


async def _artifact_id(key: str) -> str:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        response = await client._client.post("/artifacts/filter", json={
            "artifacts": {"key": {"any_": [key]}}, "limit": 1, "offset": 0, "sort": "UPDATED_DESC"})  # fmt: skip
        response.raise_for_status()
        return response.json()[0]["id"]


def _deployment(api_url: str, flow: str, name: str) -> dict:
    with urllib.request.urlopen(f"{api_url}/deployments/name/{flow}/{name}", timeout=30) as response:
        return json.load(response)


def _start(api_url: str, ws: Path, log: Path) -> LocalPrefect:
    """The pool, the deployments this test uses (as `./run server` deploys them) and a worker
    whose flow runs use `ws`."""
    env = prefect_env(api_url, ws) | {"PREFECT_WORKER_QUERY_SECONDS": "1", "ODQA_PROGRESS": "log",
                                      "ODQA_PROGRESS_INTERVAL": "0"}  # a progress record (with its loss) every step
    create_process_pool(api_url, None, POOL)
    prefect(["--no-prompt", "deploy", *[arg for name in DEPLOYMENTS for arg in ("--name", name)]], env)
    return LocalPrefect(api_url, env, start_worker(env, POOL, log))


def _submit_train_form(browser, ui: str, deployment_id: str, base: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{ui}/deployments/deployment/{deployment_id}/run")
    wait = WebDriverWait(browser, UI_TIMEOUT_S)
    wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "body"), "Snapshot Dir"))
    # the settings' fields are labelled by their titles (Arch, Max Steps ...); arch, which the CLI
    # requires, has no preset: picked from its dropdown, as the README's odqa train --arch dpr
    assert _choices(browser, "Arch")[:2] == ["dpr", "ade"]
    _choose(browser, "Arch", "dpr")
    for name in ("Base", "model_id", "dev"):
        assert _field(browser, name).get_attribute("value") == "", f"{name} has a default"  # no sample datasets
    assert _field(browser, "Max Steps", "input").get_attribute("value") == ""
    _type(_field(browser, "Base"), base)
    _type(_field(browser, "model_id"), "mine")
    browser.find_element(By.XPATH, f"{_property('train')}//button[normalize-space()='Add item']").click()
    wait.until(lambda _: _field(browser, "train"))
    _type(_field(browser, "train"), "toy:train")
    _type(_field(browser, "dev"), "toy:dev")
    _type(_field(browser, "dev"), "")  # cleared: "empty: no dev evaluation"
    _type(_field(browser, "Max Steps", "input"), str(TRAIN_STEPS))
    _type(_field(browser, "Batch Size", "input"), "2")
    _type(_field(browser, "Hard Negatives", "input"), "0")
    browser.save_screenshot(str(ARTIFACTS / "prefect-project-train-form.png"))
    browser.find_element(By.XPATH, "//button[@type='submit' and normalize-space()='Submit']").click()
    wait.until(lambda _: "/run" not in browser.current_url)


def _dropdown(browser, name: str):
    """The dropdown of property `name` (the UI's select, a native <select> inside); it must be one,
    not a text field."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    assert not browser.find_elements(By.XPATH, f"{_property(name)}//textarea"), f"{name} is a text field"
    return Select(browser.find_element(By.XPATH, f"{_property(name)}//div[contains(@class, 'p-select')]"
                                                 "//select[option]"))  # fmt: skip


def _choices(browser, name: str) -> list[str]:
    """The values the dropdown of property `name` offers."""
    return [option.get_attribute("value") for option in _dropdown(browser, name).options]


def _choose(browser, name: str, value: str) -> None:
    _dropdown(browser, name).select_by_value(value)


def _report_in_run_log(browser, ui: str, flow_run_id, title: str) -> str:
    """The text of the run's log line that begins with the report `title` (its page's Logs tab)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{ui}/runs/flow-run/{flow_run_id}")
    row = WebDriverWait(browser, UI_TIMEOUT_S).until(lambda _: next(
        (r for r in browser.find_elements(By.CSS_SELECTOR, ".log-row__content") if r.text.startswith(title)), None))
    browser.save_screenshot(str(ARTIFACTS / "prefect-project-run-log.png"))
    return row.text


def _fmt_dropdown(browser, ui: str, deployment_id: str) -> list[str]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{ui}/deployments/deployment/{deployment_id}/run")
    WebDriverWait(browser, UI_TIMEOUT_S).until(ec.presence_of_element_located((By.XPATH, _property("fmt"))))
    choices = _choices(browser, "fmt")
    browser.save_screenshot(str(ARTIFACTS / "prefect-project-fmt-dropdown.png"))
    return choices


def _quick_run(browser, ui: str, deployment_id: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{ui}/deployments/deployment/{deployment_id}")
    wait = WebDriverWait(browser, UI_TIMEOUT_S)
    wait.until(ec.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Run']"))).click()
    wait.until(ec.element_to_be_clickable((By.XPATH, "//*[normalize-space()='Quick run']"))).click()


@pytest.mark.e2e
@pytest.mark.timeout(1200)  # about 3 minutes on an idle machine, 15 with 8 test suites on 2 cores
def test_a_project_on_own_data_runs_from_the_ui(prefect_harness: str, tmp_path: Path) -> None:
    from prefect.deployments import run_deployment
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from odqa.storage import Workspace
    from odqa.storage.releases import current_release

    ws = tmp_path / "ws"
    logs = tmp_path / "worker.log"
    running = _start(prefect_harness, ws, logs)
    ui = prefect_harness.removesuffix("/api")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        imported = {}
        for name, parameters in [
            ("import-passages/import-passages", {"fmt": "dpr-tsv", "path": str(write_passages(tmp_path / "p.tsv",
                                                                                                PASSAGES))}),
            ("import-questions/import-questions", {"fmt": "dpr-json", "path": str(_write_dpr_json(tmp_path / "t.json")),
                                                   "dataset": "toy", "split": "train"}),
        ]:  # fmt: skip
            done = run_deployment(name, parameters=parameters, timeout=RUN_TIMEOUT_S, poll_interval=1)
            assert done.state.is_completed(), (name, done.state, logs.read_text(errors="replace")[-4000:])
            imported[name] = done
        assert Workspace.resolve(ws).rows("passages") == len(PASSAGES)
        _logs_showing(imported["import-passages/import-passages"].id, "import passages p.tsv: done")

        train = _deployment(prefect_harness, "train", "train")
        reindex = _deployment(prefect_harness, "reindex", "reindex")
        known = {run.id for run in asyncio.run(_runs_of(train["id"])) + asyncio.run(_runs_of(reindex["id"]))}
        with headless_chromium(window="1400,4200") as browser:
            report = _report_in_run_log(browser, ui, imported["import-passages/import-passages"].id,
                                        "import passages p.tsv: done")  # fmt: skip
            assert re.search(rf"\n +passages: {len(PASSAGES)}\n", report) and "\n    source: dpr-tsv:" in report, report
            assert "None" not in report and "Report(" not in report, report  # as the CLI prints it, no repr
            formats = _fmt_dropdown(browser, ui, _deployment(prefect_harness, "import-questions", "import-questions")["id"])
            assert formats == ["dpr-json", "dpr-qas", "nq-open", "entityquestions", "squad", "beir"], formats

            _submit_train_form(browser, ui, train["id"], write_tiny_encoder(tmp_path / "base"))
            trained = _finished(train["id"], known, logs)
            assert "dev" not in trained.parameters and trained.parameters["training"]["max_steps"] == TRAIN_STEPS
            assert trained.parameters["retriever"]["arch"] == "dpr", trained.parameters
            logged = sorted({int(m[1]) for m in LOGGED_LOSS.finditer(_logs_showing(trained.id, "train mine: done"))})
            assert logged == list(range(1, TRAIN_STEPS + 1)), logged  # a progress record per step, with its loss

            browser.get(f"{ui}/artifacts/artifact/{asyncio.run(_artifact_id('train-mine'))}")
            wait = WebDriverWait(browser, UI_TIMEOUT_S)
            image = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "img[src^='data:image/png;base64,']")))
            wait.until(lambda _: browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth",
                                                        image))  # fmt: skip
            width = browser.execute_script("return arguments[0].naturalWidth", image)
            page = browser.find_element(By.TAG_NAME, "body").text
            browser.save_screenshot(str(ARTIFACTS / "prefect-project-train-artifact.png"))
            assert width >= 600 and "Dev R@K: none, dev was empty" in page, page
            assert f"Training loss at {len(logged)} logged steps ({', '.join(map(str, logged))})" in page, page

            assert current_release(Workspace.resolve(ws)) is None
            (ws / "incoming").mkdir()
            landed = write_passages(ws / "incoming" / "new.tsv", NEW_PASSAGES)  # lands where the re-index looks
            os.utime(landed, (time.time() - 3600,) * 2)  # ... an hour ago: past the settle time, complete
            _quick_run(browser, ui, reindex["id"])
            reindexed = _finished(reindex["id"], known, logs)
        release = current_release(Workspace.resolve(ws))
        assert release is not None and release.default_model and "mine" in release.default_model, release
        text = _logs_showing(reindexed.id, r"re-index \S+ published")
        assert f"looked at {ws / 'incoming'}: passages new.tsv (dpr-tsv)" in text, text
        assert "new.tsv: 1 passages imported" in text and f"passages: {len(PASSAGES)} before, 6 now" in text, text
        assert re.search(r"re-index \S+ published", text), text
    finally:
        running.stop_worker()
