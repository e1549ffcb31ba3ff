"""Rolling back to a kept release: it serves again under a new id with its own passages, and what
it replaced is held from the next publish until unheld or newer passages serve."""

from __future__ import annotations

import shutil

import pytest

from odqa.storage import Workspace
from odqa.storage.passages import passages_by_id
from odqa.storage.release_rollback import RollbackRefused, rollback
from odqa.storage.releases import (
    NoReleaseError,
    ServingChange,
    current_hold,
    current_release,
    publish,
    published_releases,
    unhold,
)
from odqa.storage.serving import ServiceRegistration, this_service
from odqa.storage.tables import Transaction
from tests.boundaries.release_builds import fake_bm25, fake_dense


def _passages(ws: Workspace, texts: dict[str, str]) -> str:
    """Replace the corpus with `texts` (id -> text), as an ingest of a new dump does; its version."""
    with Transaction(ws.root, "test-passages") as tx:
        tx.replace_source("passages", "corpus")
        tx.write("passages", [{"passage_id": pid, "title": "T", "text": text} for pid, text in texts.items()], "corpus")
    return ws.table_version("passages")


def _published(ws: Workspace, texts: dict[str, str]) -> str:
    """New passages with their BM25 and dense builds published, as a re-index does; the release id."""
    version = _passages(ws, texts)
    fake_bm25(ws, version)
    fake_dense(ws, "dpr", version, "flat")
    return publish(ws, version, keep=3).release.release


def test_a_rollback_serves_the_earlier_release_with_its_passages_and_holds_the_broken_ones(workspace: Workspace) -> None:
    good = _published(workspace, {"1": "born in Warsaw", "2": "the Seine"})
    broken = _published(workspace, {"1": "BROKEN"})
    broken_version = workspace.table_version("passages")
    done = rollback(workspace, by="test")
    restored = current_release(workspace)
    assert done.published and done.previous == broken and restored == done.release
    assert restored.restored_from == good and restored.release not in (good, broken)
    assert restored.bm25 and [d.key for d in restored.dense] == ["dpr"] and restored.dropped == []
    assert passages_by_id(workspace, None, restored.passages_files) == {"1": ("T", "born in Warsaw"),
                                                                         "2": ("T", "the Seine")}  # fmt: skip
    assert done.held.startswith(f"passages {broken_version} are held: test rolled back release {broken} at ")
    # a second rollback does not undo the first: it goes further back, or is refused; undoing is by name
    with pytest.raises(RollbackRefused, match="no kept release before .* serves other builds and is not held"):
        rollback(workspace, by="test")

    # the next publish of the broken passages (a scheduled re-index with nothing new) is held
    again = publish(workspace, broken_version)
    assert not again.published and again.held == done.held and current_release(workspace) == restored
    # republishing the restored passages (a pin) neither publishes them nor lifts the hold
    fake_dense(workspace, "dpr", restored.passages_version, "hnsw")
    assert publish(workspace, restored.passages_version, change=ServingChange(default_model="dpr")).published
    assert current_hold(workspace) is not None
    # newer passages publish, and the hold goes with them
    fixed = _published(workspace, {"1": "born in Warsaw, fixed", "2": "the Seine"})
    assert current_release(workspace).release == fixed and current_hold(workspace) is None


def test_a_rollback_on_the_same_passages_holds_the_exact_builds_until_unheld(workspace: Workspace) -> None:
    version = _passages(workspace, {"1": "born in Warsaw"})
    fake_bm25(workspace, version)
    first = publish(workspace, version).release
    fake_dense(workspace, "worse", version, "flat")
    worse = publish(workspace, version, change=ServingChange(add_models=("worse",))).release
    done = rollback(workspace, by="test")
    restored = current_release(workspace)
    assert restored.restored_from == first.release and restored.dropped == ["dense model worse"]
    assert done.held.startswith(f"the builds of release {worse.release} are held")
    assert publish(workspace, version).published is False  # what serves now, unchanged: nothing to do
    held = publish(workspace, version, change=ServingChange(add_models=("worse",)))
    assert not held.published and held.held == done.held
    assert unhold(workspace) is not None and current_hold(workspace) is None
    assert publish(workspace, version, change=ServingChange(add_models=("worse",))).published


def test_a_rollback_names_its_target_or_is_refused_changing_nothing(workspace: Workspace) -> None:
    with pytest.raises(NoReleaseError, match="nothing to roll back"):
        rollback(workspace, by="test")
    first = _published(workspace, {"1": "one"})
    with pytest.raises(RollbackRefused, match="no kept release before"):
        rollback(workspace, by="test")
    second = _published(workspace, {"1": "two"})
    third = _published(workspace, {"1": "three"})
    with pytest.raises(RollbackRefused, match="is the current one already"):
        rollback(workspace, third, by="test")
    with pytest.raises(RollbackRefused, match="'2' names 3 kept releases"):
        rollback(workspace, "2", by="test")
    with pytest.raises(RollbackRefused, match="'nope' names no kept release"):
        rollback(workspace, "nope", by="test")
    # an index folder deleted by hand
    second_release = next(r for r in published_releases(workspace) if r.release == second)
    shutil.rmtree(workspace.indexes_dir / second_release.bm25)
    with pytest.raises(RollbackRefused, match=rf"release {second} cannot serve again: index bm25/\w+ gone"):
        rollback(workspace, second, by="test")
    # a running service answering with a model the third release lacks
    fake_dense(workspace, "other", workspace.table_version("passages"), "flat")
    publish(workspace, workspace.table_version("passages"), change=ServingChange(add_models=("other",)))
    service = this_service("http://127.0.0.1:8124", "dense", "other")
    with ServiceRegistration(workspace, service) as registration:
        registration.update(release=current_release(workspace).release, dense_model="other")
        with pytest.raises(RollbackRefused, match=r"would not serve dense model other \(answered by odqa serve pid"):
            rollback(workspace, third, by="test")
    assert current_hold(workspace) is None and current_release(workspace).restored_from is None
    assert rollback(workspace, third, by="test").release.restored_from == third
    assert first  # pruned by now (three kept): named, it is refused
    with pytest.raises(RollbackRefused, match="names no kept release"):
        rollback(workspace, first, by="test")
