"""Releases never narrow what serves: a publish keeps every retriever of the current release and its
default model unless named, never takes from a running `odqa serve` what it answers with, and a
model named as the default is pinned through later publishes and re-indexes; /health says what the
service serves and why (docs/boundaries.md, "Releases never narrow what serves")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from odqa.storage import Workspace
from odqa.storage.releases import ServingChange, current_release, last_refusal, publish
from odqa.storage.serving import ServiceRegistration, live_services, serving_dir, this_service
from tests.boundaries.release_builds import (
    MORE_PASSAGES,
    NEW_PASSAGES,
    copy_workspace,
    fake_bm25,
    fake_dense,
    passage_ids,
    passages_file,
    register_trained,
    tiny_model,
)
from tests.serve.harness import REPO, ServiceThread, subprocess_env

REGISTER_AND_WAIT = """
import dataclasses, sys, time
from odqa.storage import Workspace
from odqa.storage.serving import ServiceRegistration, this_service
record = dataclasses.replace(this_service("http://127.0.0.1:1", "bm25", None), bm25=True)
with ServiceRegistration(Workspace.resolve(sys.argv[1]), record):
    print("registered", flush=True)
    time.sleep(600)
"""


def test_a_publish_narrower_than_a_live_service_is_refused_naming_it(workspace: Workspace) -> None:
    fake_bm25(workspace, "v1")
    fake_dense(workspace, "dpr", "v1")
    fake_dense(workspace, "taser", "v1")
    served = publish(workspace, "v1", change=ServingChange(default_model="dpr")).release
    service = this_service("http://127.0.0.1:8123", "hybrid", "taser")
    with ServiceRegistration(workspace, service) as registration:
        registration.update(release=served.release, bm25=True, dense_model="taser")
        assert live_services(workspace) == [registration.record]
        # dropping by name is not enough while a running service answers with it
        refused = publish(workspace, "v1", change=ServingChange(drop_models=("taser",), drop_bm25=True))
        assert not refused.published and current_release(workspace) == served
        who = f"odqa serve pid {os.getpid()} on host {service.host} at http://127.0.0.1:8123 (--retriever hybrid " \
              "--model taser); stop it first"
        assert refused.withheld == [f"bm25 (answered by {who})", f"dense model taser (answered by {who})"]
        recorded = last_refusal(workspace)
        assert recorded["lacks"] == refused.withheld and recorded["retrievers"] == ["dense model dpr"]
        # what no service answers with may go, by name only
        assert publish(workspace, "v1", change=ServingChange(drop_models=("dpr",))).withheld == [
            f"default model dpr (of release {served.release}; name the new default: odqa reindex --model M or "
            "odqa release pin --model M)"]
        narrower = publish(workspace, "v1", change=ServingChange(drop_models=("dpr",), default_model="taser"))
        assert narrower.published and narrower.release.dropped == ["dense model dpr"]
        assert last_refusal(workspace) is None
    assert live_services(workspace) == [] and not list(serving_dir(workspace).iterdir())
    assert publish(workspace, "v1", change=ServingChange(drop_bm25=True)).release.retrievers() == ["dense model taser"]


def test_a_dead_service_s_registration_is_ignored_and_removed(workspace: Workspace) -> None:
    """However a service ends (here SIGKILL), the kernel frees its flock: its record is stale."""
    fake_bm25(workspace, "v1")
    publish(workspace, "v1")
    process = subprocess.Popen([sys.executable, "-c", REGISTER_AND_WAIT, str(workspace.root)], cwd=REPO,
                               env=subprocess_env(), stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert process.stdout.readline().strip() == "registered"
        (live,) = live_services(workspace)
        assert live.pid == process.pid and live.bm25
        fake_dense(workspace, "dpr", "v2")
        withheld = publish(workspace, "v2", change=ServingChange(drop_bm25=True, add_models=("dpr",))).withheld
        assert withheld and f"odqa serve pid {process.pid}" in withheld[0]
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert list(serving_dir(workspace).glob("*.json"))  # its record is still there ...
    assert live_services(workspace) == []  # ... but not live, and now gone
    assert not list(serving_dir(workspace).iterdir())
    assert publish(workspace, "v2", change=ServingChange(drop_bm25=True, add_models=("dpr",))).published


def test_plain_publishes_keep_the_pinned_default_whatever_is_built_later(workspace: Workspace) -> None:
    fake_dense(workspace, "dpr", "v1")
    first = publish(workspace, "v1").release
    assert first.default_model == "dpr" and first.pinned_model is None  # the first dense model, not pinned
    fake_dense(workspace, "taser", "v1")
    pinned = publish(workspace, "v1", change=ServingChange(default_model="taser", by="odqa release pin")).release
    assert (pinned.default_model, pinned.pinned_model) == ("taser", "taser")
    assert pinned.pinned_by.startswith("odqa release pin at ") and pinned.default_why().startswith("pinned by")
    for version in ("v2", "v3"):  # new passages; a model built after the pin
        fake_dense(workspace, "newer", version)
        fake_dense(workspace, "dpr", version)
        fake_dense(workspace, "taser", version)
        later = publish(workspace, version).release
        assert (later.default_model, later.pinned_model, later.pinned_by) == ("taser", "taser", pinned.pinned_by)
        assert later.retrievers() == ["dense model dpr", "dense model taser"]  # a build nobody named is not served


@pytest.fixture(scope="module")
def pinned_dense(prefect_harness: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A dense-only workspace: its first re-index named model `pinned` (pinned), then a newer model
    was trained and its index built (`odqa index build`), which serves beside it."""
    from odqa.flows.compositions.reindex import reindex_flow
    from odqa.flows.stages.index import index_build_flow

    root = tmp_path_factory.mktemp("pinned")
    ws = Workspace.resolve(root / "ws")
    pinned = tiny_model(root / "pinned-model", seed=1)
    first = reindex_flow(workspace=str(ws.root), passages=passages_file(root, "passages.tsv"), model=pinned, bm25=False)
    assert first.model == pinned and current_release(ws).pinned_model == pinned
    newer = register_trained(ws, "newer", tiny_model(root / "newer-model", seed=2))
    built = index_build_flow(model=newer, workspace=str(ws.root))
    release = current_release(ws)
    assert built.release == release.release and sorted(release.dense_of(m).model for m in (pinned, newer)) == sorted(
        [pinned, newer])  # fmt: skip
    return {"root": str(ws.root), "pinned": pinned, "newer": newer, "files": str(root)}


def test_a_pinned_model_survives_later_plain_reindexes(pinned_dense: dict[str, str]) -> None:
    """The model named at the first re-index stays the default through two plain re-indexes of new
    passages, although a newer model was trained and indexed since."""
    from odqa.flows.compositions.reindex import reindex_flow
    from odqa.storage.passages import require_passages

    ws = Workspace.resolve(pinned_dense["root"])
    pinned, newer = pinned_dense["pinned"], pinned_dense["newer"]
    for name, rows in (("new.tsv", NEW_PASSAGES), ("more.tsv", MORE_PASSAGES)):
        report = reindex_flow(workspace=str(ws.root), passages=passages_file(Path(pinned_dense["files"]), name, rows))
        release = current_release(ws)
        assert report.release == release.release and not report.noop
        assert (release.default_model, release.pinned_model) == (pinned, pinned), release
        assert report.model == pinned and report.models == [pinned, newer]  # the newer one serves too: rebuilt
        assert report.figures["dense_vectors"] == ws.rows("passages")  # the pinned model's index: every passage
        assert release.passages_version == require_passages(ws)
    assert "7" in passage_ids(ws)


def test_health_says_what_the_service_serves_and_why(pinned_dense: dict[str, str], tmp_path: Path) -> None:
    """/health of a service started with --model newer: the release, the retrievers, the model and
    where it comes from, the release's pinned default and by whom; a withheld release, once one was."""
    from odqa.service.app import create_app

    ws = copy_workspace(Path(pinned_dense["root"]), tmp_path / "ws")
    release = current_release(ws)
    with ServiceThread(create_app(ws.root, model=pinned_dense["newer"], poll_s=0.2, address="http://test")) as service:
        health = requests.get(f"{service.url}/health", timeout=30).json()
        serves = health["serves"]
        assert serves["release"] == release.release and serves["retrievers"] == ["dense"]
        assert serves["default_retriever"] == "dense" and serves["model"] == "newer"
        assert serves["model_from"] == "--model newer"
        assert serves["default_model"] == Path(pinned_dense["pinned"]).name
        assert serves["pinned"]["by"].startswith("odqa reindex (flow run ")
        assert serves["default_why"] == f"pinned by {serves['pinned']['by']}"
        assert health["withheld"] is None and health["registered"] is True
        (registered,) = live_services(ws)
        assert (registered.release, registered.dense_model, registered.model) == (release.release, "newer", "newer")
        # new passages with only a BM25 build (as `odqa bm25 index` publishes it): withheld, for it lacks
        # both dense models; /health says so
        fake_bm25(ws, "v-new")
        withheld = publish(ws, "v-new", change=ServingChange(add_bm25=True))
        assert not withheld.published
        assert any("answered by odqa serve pid" in lost and "--model newer" in lost for lost in withheld.withheld)
        health = requests.get(f"{service.url}/health", timeout=30).json()
        assert health["withheld"]["passages_version"] == "v-new" and health["withheld"]["lacks"] == withheld.withheld
        assert health["serves"]["release"] == release.release
    assert live_services(ws) == []


def test_release_pin_names_a_served_model_as_the_default(pinned_dense: dict[str, str], tmp_path: Path, cli) -> None:
    """`odqa release pin --model M` publishes the same indexes with M as the pinned default; a model
    the release does not serve is refused; `odqa release show` says what serves and why."""
    ws = copy_workspace(Path(pinned_dense["root"]), tmp_path / "ws")
    before = current_release(ws)
    refused = cli("--workspace", str(ws.root), "release", "pin", "--model", "no-such-model", ok=False)
    assert refused.exit_code == 1 and "serves no dense index of 'no-such-model'" in refused.output
    pinned = cli("--workspace", str(ws.root), "release", "pin", "--model", "newer").output
    release = current_release(ws)
    assert (release.default_model, release.pinned_model) == ("newer", "newer") and release.dense == before.dense
    assert f"release {release.release}: default model newer (pinned by odqa release pin at " in pinned
    shown = cli("--workspace", str(ws.root), "release", "show").output
    assert f"default model: newer (pinned by odqa release pin at {release.created_at})" in shown
    assert f"passages: {ws.rows('passages'):,} in " in shown and "file(s), kept while the release is" in shown
    assert "running services: none" in shown
