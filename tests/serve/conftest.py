"""A workspace with one real index release (the bundled sample, BM25 + MiniLM FAISS), built once,
and the service over it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.serve.harness import ServiceThread, minilm


@pytest.fixture(scope="session")
def served_workspace(prefect_harness: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Read-only for tests: copy it (`workspace_copy`) to change it."""
    from odqa.flows.compositions.reindex import reindex_flow
    from odqa.flows.plumbing.sample_data import SAMPLE_DUMP
    from odqa.pipelines.retrieval.java import JavaMissingError, check_java

    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"the service's BM25 needs a JDK: {error}")
    root = tmp_path_factory.mktemp("served") / "ws"
    report = reindex_flow(workspace=str(root), dump=str(SAMPLE_DUMP), model=minilm())
    assert report.figures["dense_vectors"] == 150
    return root


@pytest.fixture
def workspace_copy(served_workspace: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ws"
    shutil.copytree(served_workspace, target, symlinks=True)
    return target


@pytest.fixture(scope="session")
def served_service(served_workspace: Path):
    """The service over `served_workspace`, in a thread of this process, shared by the modules that
    only read from it (one start and stop instead of one per module)."""
    from odqa.service.app import create_app

    with ServiceThread(create_app(served_workspace, poll_s=0.2)) as running:
        yield running
