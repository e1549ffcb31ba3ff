"""REST v1 (Anserini's and pyserini's shape) over a real release, and the LangChain retriever
reading it over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from odqa.service.app import create_app
from odqa.service.releases import model_display_name
from odqa.storage import Workspace
from tests.serve.harness import ServiceThread, get, minilm

QUESTION = "Where was Marie Curie born?"


@pytest.fixture
def service(served_service: ServiceThread) -> ServiceThread:
    return served_service


@pytest.mark.parametrize("index", ["bm25", "dense", "hybrid", model_display_name(minilm())])
def test_search_answers_in_the_rest_v1_shape(service: ServiceThread, index: str) -> None:
    own = requests.get(f"{service.url}/index", timeout=10).json()
    reply = get(service, f"/v1/{index}/search", query=QUESTION, hits=5, alpha=1.0)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert set(body) == {"api", "index", "version", "query", "candidates"}
    assert body["api"] == "v1" and body["index"] == index and body["version"] == own["version"]
    assert body["query"] == {"text": QUESTION}
    candidates = body["candidates"]
    assert [c["rank"] for c in candidates] == [1, 2, 3, 4, 5]
    assert all(set(c) == {"docid", "score", "rank", "doc"} for c in candidates)
    assert all(a["score"] >= b["score"] for a, b in zip(candidates, candidates[1:], strict=False))
    top = candidates[0]["doc"]
    assert top["title"] == "Marie Curie" and top["contents"] == f"{top['title']}\n{top['text']}"
    # the same hits as the service's own route
    retriever = "dense" if index not in ("bm25", "hybrid") else index
    own_hits = requests.post(f"{service.url}/search", json={"question": QUESTION, "k": 5, "retriever": retriever,
                                                            "alpha": 1.0}, timeout=60).json()["results"][0]["hits"]  # fmt: skip
    assert [c["docid"] for c in candidates] == [h["passage_id"] for h in own_hits]


def test_doc_returns_one_passage(service: ServiceThread) -> None:
    docid = get(service, "/v1/bm25/search", query=QUESTION, hits=1).json()["candidates"][0]["docid"]
    reply = get(service, f"/v1/bm25/doc/{docid}")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["api"] == "v1" and body["docid"] == docid and body["doc"]["title"] == "Marie Curie"
    missing = get(service, "/v1/bm25/doc/no-such-passage")
    assert missing.status_code == 404 and "no passage 'no-such-passage'" in missing.json()["error"]


@pytest.mark.parametrize(("path", "params", "status", "message"), [
    ("/v1/bm25/search", {}, 400, "give the query as ?query="),
    ("/v1/bm25/search", {"query": "  "}, 400, "query is empty"),
    ("/v1/bm25/search", {"query": "amazon\x07founder"}, 400, "a control character (U+0007)"),
    ("/v1/bm25/search", {"query": QUESTION, "hits": "ten"}, 400, "hits must be a whole number"),
    ("/v1/bm25/search", {"query": QUESTION, "hits": 0}, 400, "hits must be a whole number"),
    ("/v1/bm25/search", {"query": "x" * 2001}, 400, "the limit is 2,000"),
    ("/v1/hybrid/search", {"query": QUESTION, "alpha": "much"}, 400, "alpha must be a number"),
    ("/v1/hybrid/search", {"query": QUESTION}, 400, "has no tuned alpha for this model"),
    ("/v1/msmarco-passage/search", {"query": QUESTION}, 400, "no index 'msmarco-passage'"),
    ("/v1/msmarco-passage/doc/1", {}, 400, "available: bm25, dense"),
])  # fmt: skip
def test_bad_requests_get_an_error_object(service: ServiceThread, path: str, params: dict, status: int,
                                          message: str) -> None:  # fmt: skip
    reply = get(service, path, **params)
    assert reply.status_code == status and set(reply.json()) == {"error"}
    assert message in reply.json()["error"]


def test_an_empty_workspace_answers_503(tmp_path: Path) -> None:
    with ServiceThread(create_app(Workspace.resolve(tmp_path / "ws").root, poll_s=0.2)) as empty:
        reply = get(empty, "/v1/bm25/search", query=QUESTION)
    assert reply.status_code == 503 and "no index published" in reply.json()["error"]


def test_langchain_retriever_over_http(service: ServiceThread) -> None:
    from odqa.langchain import OdqaRetriever

    docs = OdqaRetriever(url=service.url, retriever="bm25", k=3).invoke(QUESTION)
    assert len(docs) == 3 and docs[0].metadata["title"] == "Marie Curie" and docs[0].page_content
    assert [d.metadata["rank"] for d in docs] == [1, 2, 3]
    with pytest.raises(RuntimeError, match="answered 400: no index 'splade'"):
        OdqaRetriever(url=service.url, retriever="splade").invoke(QUESTION)
