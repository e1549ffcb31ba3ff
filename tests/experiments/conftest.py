"""The bundled sample as the recipe and experiment tests need it: its passages, its template
questions (train/dev/test) and the BM25 index, built once; each test works on its own copy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_DIR
from tests.experiments.tiny_encoder import write_tiny_encoder


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"))


@pytest.fixture(scope="session")
def sample_workspace(prefect_harness: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Read-only for tests: take `sample_copy`."""
    from odqa.flows.plumbing.sample_data import SAMPLE_DUMP
    from odqa.flows.stages.bm25 import bm25_index_flow
    from odqa.flows.stages.questions import trex_questions_flow
    from odqa.flows.stages.wikipedia import ingest_wikipedia_flow
    from odqa.pipelines.retrieval.java import JavaMissingError, check_java

    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"the recipe's BM25 negatives need a JDK: {error}")
    root = tmp_path_factory.mktemp("sample-questions") / "ws"
    ingest_wikipedia_flow(dump=str(SAMPLE_DUMP), workspace=str(root), workers=1)
    wikidata = SAMPLE_DIR / "wikidata"
    trex_questions_flow(templates=str(wikidata / "relation_query_templates.json"), dataset="trex",
                        triples=str(wikidata / "triples.jsonl"), workspace=str(root))  # fmt: skip
    bm25_index_flow(workspace=str(root), threads=1)
    return root


@pytest.fixture
def sample_copy(sample_workspace: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ws"
    shutil.copytree(sample_workspace, target, symlinks=True)
    return target
