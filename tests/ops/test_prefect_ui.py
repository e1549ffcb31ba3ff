"""What a user meets in the Prefect UI, in a real headless browser: the `train/train` Custom run
form shows every parameter with its description and a typed field (no 'Property is type "None"'
where a value can be typed), and an evaluation artifact shows its R@K plot as an image.
Also without a browser: every deployed flow documents every parameter, and the deployed form
schema turns `T | None = None` parameters into plain typed fields."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
import yaml

from odqa.flows.plumbing.deployment_forms import typed_field, typed_form
from odqa.flows.plumbing.server import POOL, REPO_ROOT, create_process_pool, prefect, prefect_env
from tests.browser import ARTIFACTS, headless_chromium
from tests.ops.input_files import PASSAGES, write_passages, write_questions

UI_TIMEOUT_S = 90


def _deployed_flows() -> dict[str, object]:
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    return {d["name"]: load_flow_from_entrypoint(d["entrypoint"]) for d in spec["deployments"]}


def _text(markdown: str) -> str:
    """A description as the page shows it: markdown code marks gone, whitespace collapsed."""
    return re.sub(r"\s+", " ", markdown.replace("`", "")).strip()


def test_every_deployed_parameter_has_a_description_and_a_typed_field() -> None:
    from prefect.utilities.callables import parameter_schema

    for name, flow in _deployed_flows().items():
        schema = typed_form(parameter_schema(flow).model_dump())
        for parameter, prop in schema["properties"].items():
            model = schema["definitions"].get(prop.get("$ref", "").rsplit("/", 1)[-1], {})
            assert prop.get("description") or model.get("description"), f"{name}: {parameter!r} has no description"
            choices = [c.get("type") for c in prop.get("anyOf", [])]
            assert choices in ([], ["boolean", "null"]) or prop.get("default") is not None, (name, parameter, prop)


def test_typed_field_keeps_tri_state_switches_and_real_defaults() -> None:
    optional_int = {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None, "title": "epochs"}
    assert typed_field(optional_int) == {"type": "integer", "title": "epochs"}
    tri_state = {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": None}
    assert typed_field(tri_state) == tri_state  # an untouched toggle would send false
    with_default = {"anyOf": [{"type": "number"}, {"type": "null"}], "default": 10.0}
    assert typed_field(with_default) == with_default


def _evaluated_workspace(cli, tmp_path: Path) -> str:
    """A workspace with one real evaluation: passages, questions and an imported TREC run."""
    from odqa.storage import Workspace

    ws = tmp_path / "ws"
    cli("-w", str(ws), "import", "passages", "--format", "dpr-tsv", str(write_passages(tmp_path / "p.tsv", PASSAGES)))
    cli("-w", str(ws), "import", "questions", "--format", "dpr-qas", "--dataset", "toy", "--split", "dev",
        str(write_questions(tmp_path / "toy.qa.csv")))  # fmt: skip
    questions = Workspace.resolve(ws).read_table("questions", columns=["question_id"]).column(0).to_pylist()
    run = tmp_path / "run.trec"
    run.write_text("".join(f"{qid} Q0 {pid} {rank} {1.0 / rank} toy\n" for qid in questions
                           for rank, pid in enumerate(["1", "2", "3"], start=1)), encoding="utf-8")  # fmt: skip
    cli("-w", str(ws), "import", "run", "--run", "toy-run", str(run))
    cli("-w", str(ws), "evaluate", "--run", "toy-run")
    return "toy-run"


async def _artifact_id(key: str) -> str:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        response = await client._client.post("/artifacts/filter", json={
            "artifacts": {"key": {"any_": [key]}}, "limit": 1, "offset": 0, "sort": "UPDATED_DESC"})  # fmt: skip
        response.raise_for_status()
        return response.json()[0]["id"]


def _deploy_train(api_url: str) -> dict:
    env = prefect_env(api_url)
    create_process_pool(api_url, None, POOL)
    prefect(["--no-prompt", "deploy", "--name", "train"], env)
    import urllib.request

    with urllib.request.urlopen(f"{api_url}/deployments/name/train/train", timeout=30) as response:
        return json.load(response)


@pytest.mark.e2e
def test_the_train_form_describes_every_parameter_and_artifacts_show_plots(cli, prefect_harness: str,
                                                                             tmp_path: Path) -> None:  # fmt: skip
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from odqa.flows.stages.train import train_flow
    from odqa.models.settings import RetrieverSettings, TrainSettings

    run = _evaluated_workspace(cli, tmp_path)
    deployment = _deploy_train(prefect_harness)
    ui = prefect_harness.removesuffix("/api")
    from prefect.utilities.callables import parameter_docstrings

    descriptions = parameter_docstrings(train_flow.__doc__)
    assert set(descriptions) == set(deployment["parameter_openapi_schema"]["properties"])
    settings = {n: f.description for m in (RetrieverSettings, TrainSettings) for n, f in m.model_fields.items()}
    with headless_chromium(window="1400,4200") as browser:
        wait = WebDriverWait(browser, UI_TIMEOUT_S)
        browser.get(f"{ui}/deployments/deployment/{deployment['id']}/run")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        try:
            wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "body"), "Checkpoint Minutes"))
        finally:
            browser.save_screenshot(str(ARTIFACTS / "prefect-train-form.png"))
        page = re.sub(r"\s+", " ", browser.find_element(By.TAG_NAME, "body").text)
        missing = [name for name, text in (descriptions | settings).items() if _text(text) not in page]
        assert not missing, f"no description shown for {missing}"
        assert 'Property is type "None"' not in page  # `resume` is a choice, the settings' fields typed

        browser.get(f"{ui}/artifacts/artifact/{asyncio.run(_artifact_id(f'evaluation-{run}-plots'))}")
        image = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "img[src^='data:image/png;base64,']")))
        wait.until(lambda _: browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image))
        width = browser.execute_script("return arguments[0].naturalWidth", image)
        browser.save_screenshot(str(ARTIFACTS / "prefect-evaluation-artifact.png"))
    assert width >= 200  # a real plot, decoded by the browser
