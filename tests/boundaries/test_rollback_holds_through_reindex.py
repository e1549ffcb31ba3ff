"""An operator rolls back a re-index that published broken passages; the next scheduled re-index
(nothing new in incoming/) must not publish them again, and newer passages or `odqa release
unhold` end the hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from odqa.storage.releases import current_release
from tests.boundaries.release_builds import copy_workspace, passage_ids, passages_file

BROKEN = [("6", "<html>Error 503: the mirror was down when this file was cut</html>", "Error")]


def test_a_rolled_back_reindex_is_not_published_again_by_the_next_one(bm25_served: Path, tmp_path: Path, cli) -> None:
    from odqa.flows.compositions.reindex import reindex_flow

    ws = copy_workspace(bm25_served, tmp_path / "ws")
    good = current_release(ws)
    broken_report = reindex_flow(workspace=str(ws.root), passages=passages_file(tmp_path, "mirror.tsv", BROKEN))
    broken = current_release(ws)
    assert broken.release == broken_report.release != good.release and "6" in passage_ids(ws)

    out = cli("--workspace", str(ws.root), "release", "rollback").output
    restored = current_release(ws)
    assert f"release {restored.release}: release {good.release} serves again (was {broken.release})" in out
    assert f"held: passages {broken.passages_version} are held: odqa release rollback rolled back" in out
    assert (restored.passages_version, restored.bm25) == (good.passages_version, good.bm25)

    scheduled = reindex_flow(workspace=str(ws.root))  # the weekly run: incoming/ holds nothing new
    assert scheduled.noop and scheduled.release == restored.release and "bm25_documents" not in scheduled.figures
    assert scheduled.held.startswith(f"passages {broken.passages_version} are held") and current_release(ws) == restored
    shown = cli("--workspace", str(ws.root), "release", "show").output
    assert f"restored from release {good.release} by a rollback" in shown and "held: passages" in shown

    assert "no longer held" in cli("--workspace", str(ws.root), "release", "unhold").output
    again = reindex_flow(workspace=str(ws.root))  # the operator judged them fine after all
    assert not again.noop and current_release(ws).passages_version == broken.passages_version
    assert "nothing was held" in cli("--workspace", str(ws.root), "release", "unhold").output


def test_the_release_rollback_deployment_rolls_back_as_the_command_does(bm25_served: Path, tmp_path: Path) -> None:
    """The flow behind the UI's `release-rollback` deployment (prefect.yaml), run as a flow."""
    from odqa.flows.compositions.reindex import reindex_flow
    from odqa.flows.stages.release_rollback import release_rollback_flow
    from odqa.storage.release_rollback import RollbackRefused

    ws = copy_workspace(bm25_served, tmp_path / "ws")
    good = current_release(ws)
    broken = reindex_flow(workspace=str(ws.root), passages=passages_file(tmp_path, "mirror.tsv", BROKEN)).release
    report = release_rollback_flow(workspace=str(ws.root))
    assert (report.restored_from, report.previous) == (good.release, broken)
    assert report.release == current_release(ws).release and report.dropped == []
    assert "are held: the release-rollback deployment (flow run " in report.held
    with pytest.raises(RollbackRefused, match="serves other builds and is not held"):
        release_rollback_flow(workspace=str(ws.root))
    assert current_release(ws).release == report.release
