"""`import odqa`: searchers, BEIR-style encoding, tables and evaluation over a real release, the
documented example run as written, and the LangChain retriever in process."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

import odqa
from odqa.storage.catalog import ReadOnlyViolation
from tests.serve.harness import REPO, minilm, subprocess_env

QUESTION = "Where was Marie Curie born?"
DOC = REPO / "docs" / "python-api.md"


@pytest.fixture(scope="module")
def ws(served_workspace: Path) -> odqa.Workspace:
    return odqa.open_workspace(served_workspace)


@pytest.mark.parametrize("kind", ["bm25", "dense", "hybrid"])
def test_each_searcher_answers_with_passages(ws: odqa.Workspace, kind: str) -> None:
    with ws.searcher(kind, None if kind == "bm25" else minilm(), alpha=1.0) as searcher:
        assert searcher.kind == kind
        results = searcher.search([QUESTION, "Which river flows through Zurich?"], k=5)
    assert len(results) == 2 and all(len(hits) == 5 for hits in results)
    hits = results[0]
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert hits[0].title == "Marie Curie" and "Warsaw" in " ".join(h.text or "" for h in hits)
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))


def test_searcher_refuses_what_it_cannot_answer(ws: odqa.Workspace, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown retriever 'sparse'"):
        ws.searcher("sparse")
    with pytest.raises(ValueError, match="needs a model"):
        ws.searcher("dense")
    with pytest.raises(ValueError, match="no tuned alpha"):
        ws.searcher("hybrid", minilm())
    with ws.searcher("bm25") as searcher, pytest.raises(TypeError, match="wrap one question in a list"):
        searcher.search(QUESTION)
    with pytest.raises(FileNotFoundError, match="no odqa workspace"):
        odqa.open_workspace(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()


def test_load_retriever_gives_the_searchers_vectors(ws: odqa.Workspace) -> None:
    with ws.searcher("dense", minilm()) as searcher:
        hits = searcher.search([QUESTION], k=4)[0]
    corpus = [{"title": h.title, "text": h.text} for h in hits]
    for encoder in (odqa.load_retriever(minilm()), odqa.load_retriever(minilm(), workspace=ws)):
        query = encoder.encode_queries([QUESTION], batch_size=2)
        passages = encoder.encode_corpus(corpus, batch_size=2)
        assert query.dtype == np.float32 and passages.shape == (4, query.shape[1])
        np.testing.assert_allclose(query @ passages.T, [[h.score for h in hits]], atol=1e-4)
    as_lists = encoder.encode_corpus({"title": [c["title"] for c in corpus], "text": [c["text"] for c in corpus]})
    np.testing.assert_allclose(as_lists, passages, atol=1e-6)
    tensor = encoder.encode_queries([QUESTION], batch_size=2, convert_to_tensor=True)
    np.testing.assert_allclose(tensor.numpy(), query, atol=1e-6)
    assert encoder.similarity in ("dot", "cos_sim")
    with pytest.raises(ValueError, match="corpus item 1 is not"):
        encoder.encode_corpus([corpus[0], "just text"])


def test_tables_read_as_arrow_duckdb_and_sql(ws: odqa.Workspace) -> None:
    assert {"passages", "articles", "runs", "metrics"} <= set(ws.tables())
    passages = ws.table("passages", columns=["passage_id", "title"])
    assert passages.column_names == ["passage_id", "title"] and passages.num_rows == 150
    curie = ws.duckdb("passages").filter("title = 'Marie Curie'")
    assert curie.count("*").fetchall()[0][0] == passages.filter(pc.equal(passages["title"], "Marie Curie")).num_rows > 0
    assert ws.sql("SELECT count(*) AS n FROM passages").to_pylist() == [{"n": 150}]
    with pytest.raises(ReadOnlyViolation):
        ws.sql("DELETE FROM passages")
    with pytest.raises(KeyError, match="unknown table 'pasages'"):
        ws.table("pasages")


def test_evaluate_equals_the_evaluate_verb(cli, workspace_copy: Path) -> None:
    w = ("-w", str(workspace_copy))
    cli(*w, "import", "questions", "--format", "dpr-qas", "--dataset", "sample", "--split", "dev",
        str(REPO / "sample" / "qa" / "dpr-qas-sample.tsv"))  # fmt: skip
    cli(*w, "retrieve", "--retriever", "bm25", "--dataset", "sample", "--split", "dev", "--run", "bm25-sample",
        "--k", "20")  # fmt: skip
    cli(*w, "evaluate", "--run", "bm25-sample", "--k", "1,5,20")
    ws = odqa.open_workspace(workspace_copy)
    stored = ws.sql("SELECT metric, \"group\", value FROM metrics WHERE run = 'bm25-sample'").to_pylist()
    mine = ws.evaluate("bm25-sample", ks=(1, 5, 20)).select(["metric", "group", "value"]).to_pylist()
    by_name = {(row["metric"], row["group"]): row["value"] for row in mine}
    assert len(by_name) == len(mine) == len(stored)
    assert by_name == pytest.approx({(row["metric"], row["group"]): row["value"] for row in stored})
    assert {"R@1", "R@5", "R@20"} <= {metric for metric, _ in by_name}
    with pytest.raises(ValueError, match="answer matching"):
        ws.evaluate("bm25-sample", match="fuzzy")


CHECK_NO_PREFECT = """
import sys
loaded = sorted(name for name in sys.modules if name == "prefect" or name.startswith("prefect."))
print("prefect modules:", loaded)
"""


def test_the_documented_example_runs_without_prefect(served_workspace: Path) -> None:
    """The example of docs/python-api.md, as written, on the bundled sample's release."""
    example = re.search(r"## Example\n.*?```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S).group(1)
    env = subprocess_env(ODQA_WORKSPACE=str(served_workspace), ODQA_MODEL=minilm())
    done = subprocess.run([sys.executable, "-c", example + CHECK_NO_PREFECT], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Marie Curie" in done.stdout and "150 passages" in done.stdout
    assert "prefect modules: []" in done.stdout


def test_langchain_retriever_in_process(served_workspace: Path) -> None:
    from odqa.langchain import OdqaRetriever

    retriever = OdqaRetriever(workspace=str(served_workspace), retriever="dense", model=minilm(), k=3)
    docs = retriever.invoke(QUESTION)
    retriever.close()
    assert len(docs) == 3 and docs[0].metadata["title"] == "Marie Curie"
    assert set(docs[0].metadata) == {"passage_id", "title", "score", "rank"} and docs[0].page_content
    with pytest.raises(ValueError, match="exactly one of workspace"):
        OdqaRetriever(retriever="bm25")
