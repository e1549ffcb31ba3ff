"""Helpers of the hostile-input probes: a workspace with a few rows, and its fingerprint."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from odqa.storage import Workspace

# Files a refused command may still touch: the shell catalog (refreshed when stale), locks, its log.
VOLATILE = ("catalog.duckdb", ".lock", "locks", "logs")


def workspace_state(root: Path) -> dict[str, str]:
    """Every file of the workspace (but the volatile ones) with its sha256: what a probe must not change."""
    state = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_file() and not any(part.startswith(VOLATILE) for part in relative.split("/")):
            state[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def table_counts(ws: Workspace) -> dict[str, int]:
    return {table: ws.rows(table) for table in ("articles", "passages", "questions")}


@pytest.fixture
def filled(workspace: Workspace) -> Workspace:
    """A workspace with two articles and two passages committed."""
    with workspace.transaction("seed") as tx:
        tx.write("articles", [{"article_id": i, "title": f"T{i}", "namespace": 0, "is_redirect": False}
                              for i in (1, 2)], source="seed")
        tx.write("passages", [{"passage_id": f"p{i}", "title": f"T{i}", "text": f"text {i}", "position": 0}
                              for i in (1, 2)], source="seed")
    return workspace


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The random 3-layer BERT of tests/models, so a training takes seconds."""
    from tests.models.conftest import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-bert"), layers=3, dropout=0.0, seed=0)


@pytest.fixture(scope="session")
def bm25_served(prefect_harness: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace that serves BM25 only (no model trained or named): a few passages imported, then
    `odqa bm25 index`. Read-only: the release tests copy it (`release_builds.copy_workspace`)."""
    from odqa.flows.stages.bm25 import bm25_index_flow
    from odqa.flows.stages.passages import import_passages_flow
    from odqa.pipelines.retrieval.java import JavaMissingError, check_java
    from tests.boundaries.release_builds import passages_file

    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"BM25 needs a JDK: {error}")
    root = tmp_path_factory.mktemp("bm25-served")
    import_passages_flow(fmt="dpr-tsv", path=passages_file(root, "passages.tsv"), workspace=str(root / "ws"))
    bm25_index_flow(workspace=str(root / "ws"))
    return root / "ws"
