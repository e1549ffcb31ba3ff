"""`k` has one limit everywhere, and no search allocates beyond its corpus (issue 41).

`searcher.search(q, k=10**8)` over 217 passages passed 4 GB: FAISS allocates n x k scores and
labels before it knows there are 217 vectors. Here a real FAISS index of 217 vectors and a real
(tiny, random) question encoder stand behind the API's `Searcher`, `odqa search` and LangChain
(the service's routes: tests/boundaries/test_request_sizes.py)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from odqa.api.search import Searcher
from odqa.flows.cli import main
from odqa.pipelines.dense.faiss_index import build_faiss_index, open_faiss_index
from odqa.pipelines.dense.sharded_encoding import EncodingManifest, write_manifest, write_shard
from odqa.pipelines.search.dense_searcher import DenseSearcher
from odqa.pipelines.search.searcher import search_run
from odqa.storage import Workspace

PASSAGES = 217


@pytest.fixture(scope="module")
def dense(tiny_checkpoint: str, tmp_path_factory: pytest.TempPathFactory) -> DenseSearcher:
    from odqa.models.retriever import load_retriever

    encoder = load_retriever(tiny_checkpoint)
    vectors = np.random.default_rng(0).standard_normal((PASSAGES, encoder.embedding_dim)).astype(np.float32)
    embeddings, folder = tmp_path_factory.mktemp("emb"), tmp_path_factory.mktemp("faiss") / "flat"
    manifest = EncodingManifest("model", "corpus", PASSAGES, encoder.embedding_dim, "float32", "dot")
    manifest.shards.append(write_shard(embeddings, 0, pa.array([f"p{i}" for i in range(PASSAGES)]), vectors))
    manifest.complete, manifest.num_passages = True, PASSAGES
    write_manifest(embeddings, manifest)
    build_faiss_index(embeddings, folder, progress=False)
    return DenseSearcher(encoder, open_faiss_index(folder, mmap=None))


def test_k_over_the_limit_is_refused_naming_it(dense: DenseSearcher, workspace: Workspace) -> None:
    api = Searcher(workspace, dense)
    for search in (lambda k: api.search(["Where was Marie Curie born?"], k=k),
                   lambda k: dense.search(["Where was Marie Curie born?"], k),
                   lambda k: list(search_run(dense, pa.table({"question_id": ["q"], "question": ["x"]}), k))):  # fmt: skip
        with pytest.raises(ValueError, match=r"k=50,000 is over the limit of 10,000 passages per question.*ODQA_MAX_K"):
            search(50_000)
    assert len(api.search(["Where was Marie Curie born?"], k=10_000, with_text=False)[0]) == PASSAGES


def test_a_large_k_never_allocates_beyond_the_corpus(dense: DenseSearcher, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODQA_MAX_K", str(10**9))  # the limit raised: only the corpus bounds the search
    tracemalloc.start()
    try:
        hits = dense.search(["Where was Marie Curie born?", "Which river flows through Zurich?"], 10**7)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [len(row) for row in hits.ranked()] == [PASSAGES, PASSAGES]
    assert peak < 16 * 2**20, f"k=10**7 over {PASSAGES} passages allocated {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize("args", [
    ["search", "--k", "100000000", "a question"],
    ["retrieve", "--dataset", "d", "--split", "s", "--run", "r", "--k", "20000"],
    ["retrieve", "--dataset", "d", "--split", "s", "--run", "r", "--retriever", "hybrid", "--depth", "20000"],
    ["mine", "--model", "m", "--dataset", "d", "--split", "s", "--depth", "20000"],
    ["negatives", "bm25", "--dataset", "d", "--split", "s", "--depth", "20000"],
], ids=["search --k", "retrieve --k", "retrieve --depth", "mine --depth", "negatives --depth"])  # fmt: skip
def test_the_cli_refuses_k_over_the_limit_before_it_starts(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["-w", str(tmp_path / "ws"), *args])
    assert result.exit_code == 2, result.output
    assert "over the limit of 10,000 passages per question" in result.output and "ODQA_MAX_K" in result.output
    assert not (tmp_path / "ws").exists()  # refused before anything was opened or started


def test_langchain_takes_the_same_limit(workspace: Workspace) -> None:
    from pydantic import ValidationError

    from odqa.langchain import OdqaRetriever

    for source in ({"workspace": str(workspace.root)}, {"url": "http://127.0.0.1:9"}):
        with pytest.raises(ValidationError, match="over the limit of 10,000"):
            OdqaRetriever(k=10**8, **source)
