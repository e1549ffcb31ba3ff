"""A re-index rebuilds what serves, and nothing it cannot: BM25 alone is a complete re-index (no
model needed), a run that cannot do its work fails before it ingests anything, and switching a
served retriever off is refused unless it is dropped by name (docs/boundaries.md, "Releases never
narrow what serves")."""

from __future__ import annotations

from pathlib import Path

import pytest

from odqa.storage.releases import current_release
from tests.boundaries.release_builds import (
    NEW_PASSAGES,
    copy_workspace,
    passage_ids,
    passages_file,
    tiny_model,
)


def test_a_bm25_only_workspace_reindexes_without_a_model(bm25_served: Path, tmp_path: Path) -> None:
    from odqa.flows.compositions.reindex import reindex_flow

    ws = copy_workspace(bm25_served, tmp_path / "ws")
    served = current_release(ws)
    report = reindex_flow(workspace=str(ws.root), passages=passages_file(tmp_path, "new.tsv", NEW_PASSAGES))
    release = current_release(ws)
    assert not report.noop and report.release == release.release and report.previous == served.release
    assert release.bm25 and release.dense == [] and report.model is None and report.models == []
    assert report.figures["bm25_documents"] == report.figures["passages"] == 6 == ws.rows("passages")
    assert release.passages_version != served.passages_version and "6" in passage_ids(ws)


def test_a_model_that_cannot_be_loaded_fails_before_anything_is_ingested(bm25_served: Path, tmp_path: Path) -> None:
    from odqa.flows.compositions.reindex import reindex_flow

    ws = copy_workspace(bm25_served, tmp_path / "ws")
    served, before = current_release(ws), passage_ids(ws)
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(ValueError, match=rf"refused: model '{missing}'.* cannot be loaded"):
        reindex_flow(workspace=str(ws.root), passages=passages_file(tmp_path, "new.tsv", NEW_PASSAGES), model=missing)
    assert passage_ids(ws) == before and current_release(ws) == served


def test_no_dense_is_refused_while_dense_serves_unless_the_model_is_dropped(bm25_served: Path, tmp_path: Path,
                                                                           cli) -> None:  # fmt: skip
    """`odqa reindex --no-dense` on a BM25 + dense release: refused before it ingests, naming the
    model; with `--drop-model` it publishes BM25 alone, with the new passages."""
    ws = copy_workspace(bm25_served, tmp_path / "ws")
    model = tiny_model(tmp_path / "model", seed=3)
    cli("--workspace", str(ws.root), "reindex", "--model", model)
    served = current_release(ws)
    assert served.bm25 and served.default_model == model
    new = passages_file(tmp_path, "new.tsv", NEW_PASSAGES)
    refused = cli("--workspace", str(ws.root), "reindex", "--no-dense", "--passages", new, ok=False)
    assert refused.exit_code == 1
    assert f"the new release would lack dense model {model} (served by release {served.release}" in refused.output
    assert "Nothing was changed" in refused.output and "--drop-model" in refused.output
    assert ws.rows("passages") == 5 and current_release(ws) == served
    cli("--workspace", str(ws.root), "reindex", "--no-dense", "--drop-model", model, "--passages", new)
    release = current_release(ws)
    assert release.bm25 and release.dense == [] and release.default_model is None
    assert release.dropped == [f"dense model {model}"] and ws.rows("passages") == 6
    assert release.passages_version != served.passages_version
