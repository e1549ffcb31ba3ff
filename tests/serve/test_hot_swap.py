"""Hot swap: a new release is loaded beside the old one and swapped in; the old one is freed
only when its last request ends; a release that fails to load leaves the old one serving."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from odqa.service.releases import ReleaseHolder
from odqa.storage import Workspace
from odqa.storage.releases import Release, current_release, switch_current


def _clone_release(ws: Workspace, new_id: str, source: Release | None = None, copy_dense: bool = False) -> Release:
    """A second release serving the builds of `source` (default: the current one) under a new id;
    with `copy_dense`, from a copy of its dense index folder (which a test may then break)."""
    source = source or current_release(ws)
    dense = source.dense
    if copy_dense:
        entry = source.dense[0]
        copied = {kind: f"{folder}-{new_id}" for kind, folder in entry.indexes.items()}
        for kind, folder in entry.indexes.items():
            shutil.copytree(ws.indexes_dir / folder, ws.indexes_dir / copied[kind])
        dense = [dataclasses.replace(entry, indexes=copied), *source.dense[1:]]
    return dataclasses.replace(source, release=new_id, dense=dense)


@pytest.fixture
def holder(workspace_copy: Path):
    held = ReleaseHolder(Workspace.resolve(workspace_copy), poll_s=3600)  # polled by hand below
    held.start()
    yield held
    held.stop()


def _ask(release, question: str = "Where was Marie Curie born?") -> list:
    return release.dense.submit([(question, 3)]).result(timeout=60)[0]


def test_a_switch_swaps_in_the_new_release_and_frees_the_old_after_its_last_request(holder: ReleaseHolder) -> None:
    ws = holder.ws
    first = current_release(ws).release
    with holder.lease() as old:
        assert old.release == first
        switch_current(ws, _clone_release(ws, "29990101T000000000000Z-clone"))
        assert holder.check_pointer() is True
        with holder.lease() as new:
            assert new.release == "29990101T000000000000Z-clone" and new is not old
            assert [pid for pid, _ in _ask(new)] == [pid for pid, _ in _ask(old)]
        health = holder.health()
        assert health["version"] == new.release and health["retiring"] == [{"version": first, "in_flight": 1}]
        assert not old.closed, "freed while a request still used it"
        assert _ask(old), "the old release must keep answering its in-flight request"
    assert old.freed.wait(30), "not freed after its last request"
    assert old.closed and old.dense_searcher is None
    assert holder.health()["retiring"] == []
    assert holder.check_pointer() is False  # nothing new


def test_a_release_that_fails_to_load_is_reported_and_the_old_one_keeps_serving(holder: ReleaseHolder) -> None:
    ws = holder.ws
    original = current_release(ws)
    first = original.release
    broken = _clone_release(ws, "29990101T000000000000Z-broken", copy_dense=True)
    faiss_file = ws.indexes_dir / broken.dense[0].indexes["flat"] / "part-000.faiss"
    faiss_file.write_bytes(faiss_file.read_bytes()[:100])  # a truncated index
    switch_current(ws, broken)
    assert holder.check_pointer() is False
    health = holder.health()
    assert health["status"] == "degraded" and health["version"] == first and health["pointer"] == broken.release
    assert health["last_error"]["release"] == broken.release and health["last_error"]["kept"] == first
    with holder.lease() as release:
        assert release.release == first and _ask(release)
    assert holder.check_pointer() is False, "the same broken release is not reloaded on every poll"

    missing = dataclasses.replace(original, release="29990101T000000000000Z-missing", bm25="bm25/no-such-version")
    switch_current(ws, missing)
    assert holder.check_pointer() is False
    assert "no BM25 index" in holder.health()["last_error"]["error"]

    switch_current(ws, _clone_release(ws, "29990101T000000000000Z-good", source=original))
    assert holder.check_pointer() is True
    assert holder.health()["status"] == "ok" and holder.health()["last_error"] is None
