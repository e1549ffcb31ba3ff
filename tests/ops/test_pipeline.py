"""The end-to-end pipeline on the bundled sample: every stage runs once (as `odqa demo` runs it,
its terminal output checked), a re-run with unchanged inputs finishes from cache, and changing one
input re-runs exactly the stages downstream of it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from odqa.flows.compositions.pipeline import (
    STAGE_FLOWS,
    DomainSettings,
    EvaluationSettings,
    QuestionSettings,
    SourceSettings,
    StageOutcome,
    StageSpec,
    TrainingSettings,
    plan_stages,
    stage_key,
)
from odqa.flows.plumbing.task_runners import RunnerSettings
from odqa.models.settings import TrainSettings
from odqa.pipelines.retrieval.java import JavaMissingError, check_java
from odqa.storage import Workspace
from tests.ops.test_cli_terminal import PREFECT_NOISE

TINY_TRAINING = TrainingSettings(archs=["dpr"], mine_count=3, mine_depth=20,
                                 settings=TrainSettings(max_steps=1, batch_size=4))
TINY_QUESTIONS = QuestionSettings(paq=None, imports=[])


def tiny_evaluation(k: int = 20) -> EvaluationSettings:
    return EvaluationSettings(eval_sets=["trex:test"], k=k, zero_shot=False, hybrid_with=None)


def test_stage_keys_follow_inputs_and_upstream_outputs(tmp_path: Path) -> None:
    data = tmp_path / "facts.nt"
    data.write_text("a\n", encoding="utf-8")
    spec = StageSpec(name="s", flow="questions-trex", kwargs={"dataset": "x"}, files=[str(data)])
    up = [StageOutcome(name="ingest", key="k1", outputs={"passages": "v1"}, seconds=1.0, report={})]
    key = stage_key(spec, up)
    assert stage_key(spec, up) == key
    assert stage_key(spec, [dataclasses.replace(up[0], outputs={"passages": "v2"})]) != key
    assert stage_key(spec.model_copy(update={"kwargs": {"dataset": "y"}}), up) != key
    data.write_text("b\n", encoding="utf-8")
    assert stage_key(spec, up) != key


def test_plan_orders_stages_after_their_upstream(tmp_path: Path) -> None:
    ws = Workspace.resolve(tmp_path / "ws")
    plan = plan_stages(ws, SourceSettings(), QuestionSettings(), DomainSettings(), TrainingSettings(),
                       EvaluationSettings(), RunnerSettings())
    seen: set[str] = set()
    for spec in plan:
        assert set(spec.upstream) <= seen, spec.name
        seen.add(spec.name)
    runs = {s.kwargs["run"] for s in plan if s.flow == "evaluate"}
    assert runs == {f"{r}-{d}" for r in ("bm25", "zero-shot", "dpr", "taser", "desire-me", "hybrid")
                    for d in ("trex-test", "nq-test")}
    assert {s.flow for s in plan} <= set(STAGE_FLOWS)  # every stage is one of the flows, by the flow's own name


def test_training_settings_saved_before_the_nested_settings_still_load() -> None:
    """Pipeline parameters saved with max_steps, lr, ... at the top of `training` (deployments,
    scripts) keep their meaning: those options move into `training.settings`."""
    old = TrainingSettings.model_validate({"archs": ["dpr"], "max_steps": 7, "lr": 1e-4, "amp": "none"})
    assert (old.settings.max_steps, old.settings.lr, old.settings.amp) == (7, 1e-4, "none")
    assert old.archs == ["dpr"]
    assert TrainingSettings().settings.max_steps == 200
    assert TrainingSettings(batch_size=4).settings.max_steps == 200
    assert TrainingSettings(settings={"max_steps": 3}, lr=1e-3).settings.model_dump(exclude_unset=True) == {
        "max_steps": 3, "lr": 1e-3}
    assert TrainingSettings(epochs=2).settings.model_dump(exclude_unset=True) == {"epochs": 2}


def _run_as_the_demo(ws: str, capfd: pytest.CaptureFixture[str], **settings: Any) -> Any:
    """The pipeline as `odqa demo` runs it (its terminal session, stage lines, results table and SQL
    queries); checks what the terminal showed: one line per stage with its time, no Prefect
    records (they go to the workspace log), the results and the three queries, at most 120 lines."""
    from odqa.flows.cli.demo import run_demo
    from odqa.flows.cli.terminal import open_session

    session = open_session(Path(ws), verbose=False)
    session.terminal.stage_lines(gap=120.0)  # what `odqa demo` sets
    try:
        report = run_demo(ws, **settings)
    finally:
        session.close()
    lines = "".join(capfd.readouterr()).splitlines()
    stages = [line for line in lines if re.match(r"\[\s*\d+/\d+\] \S+ +(\d+\.\ds|cached \(ran \d+\.\ds\))$", line)]
    assert stages and len(stages) == int(stages[0].split("/")[1].split("]")[0])  # one line per stage, timed
    assert not [noise for noise in PREFECT_NOISE if noise in "\n".join(lines)]
    assert "=== Top-K retrieval accuracy (answer in the top K passages) ===" in lines
    assert sum(line.startswith("=== SQL: ") for line in lines) == 3
    assert len(lines) <= 120
    assert "Finished in state Completed()" in (Path(ws) / "logs" / "odqa.log").read_text(encoding="utf-8")
    return report


@pytest.mark.e2e
def test_pipeline_runs_then_reruns_from_cache(prefect_harness, tmp_path: Path, capfd) -> None:
    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"BM25 needs a JDK: {error}")
    from odqa.flows.compositions.pipeline import odqa_pipeline

    ws = str(tmp_path / "ws")
    settings = {"workspace": ws, "questions": TINY_QUESTIONS, "training": TINY_TRAINING}
    first = _run_as_the_demo(ws, capfd, questions=TINY_QUESTIONS, training=TINY_TRAINING, evaluation=tiny_evaluation())
    assert set(first.states.values()) == {"Completed"}, first.states
    results = {row["run"]: row for row in first.results}
    assert set(results) == {"bm25-trex-test", "dpr-trex-test"}
    for row in results.values():
        assert 0 <= row["R@1"] <= row["R@5"] <= row["R@20"] <= 1
    assert results["bm25-trex-test"]["R@20"] > 0

    again = odqa_pipeline(**settings, evaluation=tiny_evaluation())
    assert set(again.states.values()) == {"Cached"}, again.states
    assert again.results == first.results

    changed = odqa_pipeline(**settings, evaluation=tiny_evaluation(k=10))
    rerun = {name for name, state in changed.states.items() if state == "Completed"}
    assert rerun == {"run:bm25-trex-test", "run:dpr-trex-test", "evaluate:bm25-trex-test",
                     "evaluate:dpr-trex-test"}, changed.states
    assert {state for name, state in changed.states.items() if name not in rerun} == {"Cached"}


def test_runner_reaches_mapped_stages_without_changing_their_keys(tmp_path: Path) -> None:
    ws = Workspace.resolve(tmp_path / "ws")
    settings = (SourceSettings(), QuestionSettings(), DomainSettings(), TrainingSettings(), EvaluationSettings())
    local = plan_stages(ws, *settings, RunnerSettings())
    cluster = RunnerSettings(kind="dask", dask_address="tcp://10.0.0.5:8786")
    remote = plan_stages(ws, *settings, cluster)
    assert [s.name for s in local] == [s.name for s in remote]
    up = [StageOutcome(name="ingest", key="k1", outputs={"passages": "v1"}, seconds=1.0, report={})]
    assert [stage_key(s, up) for s in local] == [stage_key(s, up) for s in remote]
    mapped = {s.flow for s in remote if s.runtime}
    assert mapped == {"ingest-wikipedia", "dense-index-build", "mine-negatives", "retrieve"}
    assert all(s.runtime == {"runner": cluster.model_dump()} for s in remote if s.runtime)
    # The default runner maps only BM25 batches; ingest, encoding and mining keep their own paths.
    assert {s.name for s in local if s.runtime} == {s.name for s in local if s.name.startswith("run:bm25-")}
