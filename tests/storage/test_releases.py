"""Publishing the workspace's index builds as releases: what gets published, withheld, pruned."""

from __future__ import annotations

import json

import pytest

from odqa.storage import Workspace
from odqa.storage.index_layout import IndexLayout
from odqa.storage.releases import (
    NoReleaseError,
    ReindexBusyError,
    ServingChange,
    current_release,
    pointer_path,
    publish,
    published_releases,
    read_pointer,
    reindex_lock,
)
from tests.boundaries.release_builds import fake_bm25, fake_dense


def test_publishing_names_the_finished_builds_of_one_passages_version(workspace: Workspace) -> None:
    with pytest.raises(NoReleaseError, match="no finished index of passages version v1"):
        publish(workspace, "v1")
    fake_bm25(workspace, "v1")
    first = publish(workspace, "v1")
    assert first.published and first.previous is None
    assert first.release.bm25 == "bm25/v1" and first.release.dense == [] and first.release.default_model is None
    assert current_release(workspace) == first.release
    assert not publish(workspace, "v1").published  # the same builds: nothing to publish

    fake_dense(workspace, "dpr", "v1", "flat", "hnsw")
    fake_dense(workspace, "taser", "v1", "flat")
    second = publish(workspace, "v1", change=ServingChange(default_model="taser", add_models=("dpr",)))
    assert second.published and second.previous == first.release.release
    assert [(d.model, d.model_path, sorted(d.indexes)) for d in second.release.dense] == [
        ("dpr", "/models/dpr", ["flat", "hnsw"]), ("taser", "/models/taser", ["flat"])]
    assert second.release.dense_of("dpr").indexes["flat"] == "dense/dpr/v1/flat"
    assert second.release.default_model == "taser"
    # the default stays the current release's when the caller names none
    fake_dense(workspace, "dpr", "v1", "ivfpq")
    assert publish(workspace, "v1").release.default_model == "taser"
    on_disk = json.loads(pointer_path(workspace).read_text(encoding="utf-8"))
    assert on_disk["format"] == 2 and read_pointer(pointer_path(workspace)) == current_release(workspace)


def test_a_release_serving_less_is_withheld_until_its_indexes_are_built(workspace: Workspace) -> None:
    fake_bm25(workspace, "v1")
    fake_dense(workspace, "dpr", "v1", "flat")
    served = publish(workspace, "v1").release
    fake_bm25(workspace, "v2")  # new passages: BM25 rebuilt, the dense index not yet
    withheld = publish(workspace, "v2")
    assert not withheld.published and withheld.withheld == [
        f"dense model dpr (served by release {served.release}; drop it by name to publish without it)"]
    assert current_release(workspace) == served
    fake_dense(workspace, "dpr", "v2", "flat")
    done = publish(workspace, "v2")
    assert done.published and done.release.passages_version == "v2" and done.previous == served.release
    # less is published only when named
    fake_bm25(workspace, "v3")
    assert publish(workspace, "v3", change=ServingChange(drop_models=("dpr",))).release.dropped == ["dense model dpr"]


def test_old_releases_and_the_builds_only_they_used_are_pruned(workspace: Workspace) -> None:
    layout = IndexLayout.of(workspace)
    releases = []
    for version in ("v1", "v2", "v3"):
        fake_bm25(workspace, version)
        fake_dense(workspace, "dpr", version, "flat")
        releases.append(publish(workspace, version, keep=2))
    assert releases[-1].pruned_releases == [releases[0].release.release]
    assert sorted(releases[-1].pruned_builds) == ["bm25/v1", "dense/dpr/v1"]
    assert [r.release for r in published_releases(workspace)] == [r.release.release for r in releases[1:]]
    assert not layout.bm25(releases[0].release.passages_version).exists()
    assert layout.bm25("v2").exists() and (layout.dense_model_dir("dpr") / "model.json").is_file()


def test_a_pointer_of_an_older_odqa_is_replaced_not_trusted(workspace: Workspace) -> None:
    path = pointer_path(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"release": "20250101-old", "passages_version": "v0", "bm25": True}), encoding="utf-8")
    with pytest.raises(ValueError, match="older odqa .* odqa reindex"):
        read_pointer(path)
    assert current_release(workspace) is None
    fake_bm25(workspace, "v1")
    assert publish(workspace, "v1").published


def test_a_second_reindex_waits_then_is_refused(workspace: Workspace) -> None:
    with (reindex_lock(workspace, holder="first run"),
          pytest.raises(ReindexBusyError, match=r"already running \(pid \d+, first run, since"),
          reindex_lock(workspace, wait_seconds=0.2)):
        pass
    with reindex_lock(workspace, wait_seconds=0.2):  # released: the next one gets it
        pass


def test_a_build_not_released_yet_survives_a_publish_of_the_older_passages(workspace: Workspace) -> None:
    """`odqa bm25 index` on new passages is withheld until the dense index is rebuilt too; a
    publish of the served passages in between (`odqa release pin`, `odqa tune-hybrid`, or one
    while a re-index is still building) must not delete that build: it is not an old release's."""
    layout = IndexLayout.of(workspace)
    fake_bm25(workspace, "v1")
    fake_dense(workspace, "dpr", "v1", "flat")
    publish(workspace, "v1")
    fake_bm25(workspace, "v2")
    assert publish(workspace, "v2").withheld
    pinned = publish(workspace, "v1", change=ServingChange(default_model="dpr", by="odqa release pin"))
    assert pinned.published and pinned.pruned_builds == []
    assert layout.bm25_built("v2")
    fake_dense(workspace, "dpr", "v2", "flat")  # the missing index built: v2 is published after all
    done = publish(workspace, "v2")
    assert done.published and done.release.bm25 == "bm25/v2"
    # a build never released goes once it is older than every kept release
    fake_bm25(workspace, "v3")
    assert publish(workspace, "v3").withheld
    pruned = []
    for version in ("v4", "v5", "v6"):
        fake_bm25(workspace, version)
        fake_dense(workspace, "dpr", version, "flat")
        pruned += publish(workspace, version, keep=2).pruned_builds
    assert "bm25/v3" in pruned and not layout.bm25("v3").exists() and layout.bm25_built("v6")


def test_a_record_a_killed_publish_left_beside_the_old_pointer_is_forgotten(workspace: Workspace) -> None:
    """`switch_current` writes the new record, then the pointer: killed in between, it leaves a
    record that never served. It must not count among the kept releases (which would prune one
    that did serve too early) nor pass for a published one."""
    from odqa.storage.atomic import atomic_write_json
    from odqa.storage.releases import releases_dir, workspace_release

    fake_bm25(workspace, "v1")
    served = [publish(workspace, "v1", keep=2).release]
    fake_bm25(workspace, "v2")
    served.append(publish(workspace, "v2", keep=2).release)
    fake_bm25(workspace, "v3")
    never = workspace_release(workspace, "v3", current=current_release(workspace))
    atomic_write_json(releases_dir(workspace) / f"{never.release}.json", never.to_json())  # the kill came here
    assert current_release(workspace) == served[-1]
    fake_bm25(workspace, "v4")
    latest = publish(workspace, "v4", keep=2)
    kept = [r.release for r in published_releases(workspace)]
    assert kept == [served[-1].release, latest.release.release], kept  # v2's release kept, the unserved one gone
    assert not (releases_dir(workspace) / f"{never.release}.json").exists()
