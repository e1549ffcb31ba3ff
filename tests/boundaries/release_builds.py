"""Workspaces for the release tests (tests/boundaries/test_releases_never_narrow.py,
test_reindex_rebuilds_what_serves.py, test_reindex_on_schedule.py): finished-looking index
builds without building, small passages files, tiny real encoders, a model registered as a
training registers it."""

from __future__ import annotations

import shutil
from pathlib import Path

from odqa.storage import Workspace
from odqa.storage.index_layout import BM25_METADATA, FAISS_METADATA, IndexLayout
from tests.experiments.tiny_encoder import write_tiny_encoder
from tests.ops.input_files import PASSAGES, write_passages

NEW_PASSAGES = [("6", "Quellor river floods every spring near Zorbania's capital.", "Quellor")]
MORE_PASSAGES = [("7", "Morvil harbour ships blue granite from Farnwick.", "Morvil")]


def fake_bm25(ws: Workspace, version: str) -> None:
    """A BM25 build of `version` as a publish sees one (its metadata, written last by a real build)."""
    folder = IndexLayout.of(ws).bm25(version)
    folder.mkdir(parents=True)
    (folder / BM25_METADATA).write_text("{}", encoding="utf-8")


def fake_dense(ws: Workspace, model: str, version: str, *types: str) -> None:
    """A dense build of `model` (its record and finished indexes of `types`) as a publish sees one."""
    layout = IndexLayout.of(ws)
    layout.record_model(model, model, f"/models/{model}")
    for kind in types or ("flat",):
        folder = layout.dense(model, version).index(kind)
        folder.mkdir(parents=True)
        (folder / FAISS_METADATA).write_text("{}", encoding="utf-8")


def passages_file(folder: Path, name: str, rows: list[tuple[str, str, str]] = PASSAGES) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    return str(write_passages(folder / name, rows))


def tiny_model(folder: Path, seed: int) -> str:
    """A real, very small encoder folder (`tests.experiments.tiny_encoder`), made once per path."""
    if not (folder / "config.json").is_file():
        write_tiny_encoder(folder, layers=1, hidden=32, seed=seed)
    return str(folder)


def register_trained(ws: Workspace, model_id: str, source: str) -> str:
    """Register `source` as the trained model `model_id`, as `odqa train` registers what it trained."""
    from odqa.storage.model_registry import register_model

    register_model(ws, model_id, Path(source), {"arch": "sde", "parameters": 0, "base": source, "trained_on": "[]",
                                                  "config": "{}"}, stage=f"train:{model_id}",
                   stage_fingerprint=model_id)  # fmt: skip
    return model_id


def copy_workspace(source: Path, target: Path) -> Workspace:
    shutil.copytree(source, target, symlinks=True)
    return Workspace.resolve(target)


def passage_ids(ws: Workspace) -> list[str]:
    return sorted(row["passage_id"] for row in ws.sql("SELECT passage_id FROM passages").to_pylist())
