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


def _commit_passages(ws: Workspace, rows: list[tuple[str, str]], source: str = "corpus") -> str:
    """Replace `source`'s passages with `rows` (id, text): what an ingest or import of it does."""
    from odqa.storage.tables import Transaction

    with Transaction(ws.root, "test-passages") as tx:
        tx.replace_source("passages", source)
        tx.write("passages", [{"passage_id": pid, "title": "T", "text": text} for pid, text in rows], source)
    return ws.table_version("passages")


def test_a_kept_release_serves_the_passages_its_indexes_found_after_ingests_replaced_them(workspace: Workspace) -> None:
    """A service that loads the current release while a re-index is still encoding new passages
    (or was withheld) must show the texts its indexes found, and find every passage they hold."""
    from odqa.storage.passages import passages_by_id
    from odqa.storage.table_pins import read_pins

    v1 = _commit_passages(workspace, [("1", "born in Warsaw"), ("2", "the Seine"), ("3", "Mount Fuji")])
    fake_bm25(workspace, v1)
    served = publish(workspace, v1).release
    assert [e.path for e in served.passages_files] == [e.path for e in workspace.snapshot().files("passages")]
    for round_ in range(5):  # more commits than the snapshots a commit keeps files for
        _commit_passages(workspace, [("1", f"two Nobel prizes, round {round_}"), ("2", "the Seine")])
    assert workspace.rows("passages") == 2
    assert passages_by_id(workspace, None, served.passages_files) == {
        "1": ("T", "born in Warsaw"), "2": ("T", "the Seine"), "3": ("T", "Mount Fuji")}
    assert current_release(workspace).passages_files == served.passages_files  # the record on disk names them
    # republishing the same passages (odqa release pin, tune-hybrid) keeps naming them
    fake_dense(workspace, "dpr", v1, "flat")
    again = publish(workspace, v1, change=ServingChange(default_model="dpr", by="test"))
    assert again.published and again.release.passages_files == served.passages_files
    # once no kept release serves them, the next commit deletes them
    v2 = workspace.table_version("passages")
    fake_bm25(workspace, v2)
    fake_dense(workspace, "dpr", v2, "flat")
    newest = publish(workspace, v2, keep=1).release
    assert list(read_pins(workspace.root)) == [newest.release]
    old_files = [workspace.root / e.path for e in served.passages_files]
    assert all(path.is_file() for path in old_files)
    _commit_passages(workspace, [("9", "another source")], source="other")
    assert not any(path.is_file() for path in old_files)
    assert all((workspace.root / e.path).is_file() for e in newest.passages_files)
    with pytest.raises(FileNotFoundError, match="passages file.* gone"):
        passages_by_id(workspace, None, served.passages_files)


def test_a_release_an_older_odqa_published_names_no_passages_files(workspace: Workspace) -> None:
    from odqa.storage.releases import Release

    record = {"format": 2, "release": "20260101T000000000000Z-v1", "passages_version": "v1", "bm25": "bm25/v1",
              "dense": [], "default_model": None, "created_at": "2026-01-01T00:00:00+00:00"}  # fmt: skip
    assert Release.from_json(record).passages_files == []


def test_texts_are_read_from_the_passages_version_asked_for(workspace: Workspace) -> None:
    """What answer matching reads (`passage_texts(version=...)`): that version's texts wherever
    they still are (the current snapshot, a recent one, a kept release's pins), its files kept
    while they are read, and an error once no snapshot or release has them."""
    from odqa.storage.passages import all_passage_texts, passage_texts
    from odqa.storage.read_leases import TableVersionGone

    v1 = _commit_passages(workspace, [("1", "born in Warsaw"), ("2", "the Seine")])
    assert passage_texts(workspace, ["1", "2", "9"], with_title=True, version=v1) == (
        {"1": "T\nborn in Warsaw", "2": "T\nthe Seine"}, 1)
    v2 = _commit_passages(workspace, [("1", "two Nobel prizes")])
    assert passage_texts(workspace, ["1", "2"], with_title=False, version=v1) == (
        {"1": "born in Warsaw", "2": "the Seine"}, 0)  # a recent snapshot's
    assert passage_texts(workspace, ["1", "2"], with_title=False, version=None) == ({"1": "two Nobel prizes"}, 1)
    assert all_passage_texts(workspace, v2) == {"1": "two Nobel prizes"}
    fake_bm25(workspace, v1)
    publish(workspace, v1)
    for round_ in range(4):  # no recent snapshot has v1 any more; its release pins it
        _commit_passages(workspace, [("1", f"round {round_}")])
    assert all_passage_texts(workspace, v1) == {"1": "born in Warsaw", "2": "the Seine"}
    newest = workspace.table_version("passages")
    fake_bm25(workspace, newest)
    publish(workspace, newest, keep=1)
    _commit_passages(workspace, [("9", "another source")], source="other")
    with pytest.raises(TableVersionGone, match=f"version {v1} is no longer in"):
        passage_texts(workspace, ["1"], with_title=False, version=v1)
    assert passage_texts(workspace, ["1"], with_title=False, version=newest) == ({"1": "round 3"}, 0)
