"""A release whose model folder is gone is refused by name when a service opens it."""

from __future__ import annotations

from pathlib import Path

import pytest

from odqa.models.searchers.encoders import EncoderCache
from odqa.models.searchers.release import open_release_dense
from odqa.storage.releases import DenseRelease, Release
from odqa.storage.workspace import Workspace


def test_a_release_whose_model_folder_is_gone_names_the_release_the_folder_and_the_cure(tmp_path: Path) -> None:
    """The folder was indexed from an absolute path, then moved or deleted (a removed checkout that
    held the base model): huggingface_hub took the path for a repo name and answered "Repo id
    must be in the form 'repo_name' ...", naming neither."""
    gone = tmp_path / "checkout" / "model"
    entry = DenseRelease(model=str(gone), model_path=str(gone), key="model-1234", indexes={"flat": "dense/x/flat"})
    release = Release(release="20261202T000000000000Z-abcd", passages_version="v1", bm25=None, dense=[entry],
                      default_model=str(gone), created_at="2026-12-02T00:00:00+00:00")  # fmt: skip
    ws = Workspace.init(tmp_path / "ws")
    with pytest.raises(FileNotFoundError, match=rf"release 20261202T000000000000Z-abcd: model '{gone}' was indexed "
                                                rf"from {gone}, which no longer exists .*odqa index build"):  # fmt: skip
        open_release_dense(ws, release, None, None, EncoderCache())
