"""`POST /search`, `GET /health`, `GET /index`, `/docs` (offline) and bad requests, over a real release."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from odqa.service.app import create_app
from odqa.storage import Workspace
from tests.serve.harness import ServiceThread

QUESTION = "Where was Marie Curie born?"


@pytest.fixture(scope="module")
def service(served_workspace: Path):
    with ServiceThread(create_app(served_workspace, poll_s=0.2)) as running:
        yield running


def _search(service: ServiceThread, body: dict | str | bytes, **kw) -> requests.Response:
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return requests.post(f"{service.url}/search", data=data, headers={"Content-Type": "application/json"},
                         timeout=60, **kw)  # fmt: skip


@pytest.mark.parametrize("retriever", ["dense", "bm25", "hybrid"])
def test_search_answers_from_the_current_release(service: ServiceThread, served_workspace: Path,
                                                 retriever: str) -> None:  # fmt: skip
    from odqa.storage import Workspace
    from odqa.storage.releases import current_release

    version = current_release(Workspace.resolve(served_workspace)).release
    reply = _search(service, {"question": QUESTION, "k": 5, "retriever": retriever, "alpha": 1.0})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["version"] == version and body["retriever"] == retriever
    hits = body["results"][0]["hits"]
    assert [h["rank"] for h in hits] == [1, 2, 3, 4, 5]
    assert hits[0]["title"] == "Marie Curie" and "Warsaw" in " ".join(h["text"] for h in hits)
    assert all(a["score"] >= b["score"] for a, b in zip(hits, hits[1:], strict=False))


def test_a_batch_gets_one_result_list_per_question_in_order(service: ServiceThread) -> None:
    questions = [QUESTION, "Which river flows through Zurich?", "Who painted the Mona Lisa?"]
    body = _search(service, {"questions": questions, "k": 3}).json()
    assert [r["question"] for r in body["results"]] == questions
    assert all(len(r["hits"]) == 3 for r in body["results"])
    single = [_search(service, {"question": q, "k": 3}).json()["results"][0]["hits"] for q in questions]
    assert [[h["passage_id"] for h in r["hits"]] for r in body["results"]] == [[h["passage_id"] for h in s]
                                                                            for s in single]


def test_concurrent_requests_are_micro_batched(service: ServiceThread) -> None:
    before = requests.get(f"{service.url}/health", timeout=10).json()["batching"]["dense"]
    questions = [f"{QUESTION} ({i})" for i in range(24)]
    with ThreadPoolExecutor(12) as pool:
        replies = list(pool.map(lambda q: _search(service, {"question": q, "k": 2}), questions))
    assert all(r.status_code == 200 for r in replies)
    after = requests.get(f"{service.url}/health", timeout=10).json()["batching"]["dense"]
    assert after["items"] - before["items"] == 24
    assert after["batches"] - before["batches"] < 24, "24 concurrent questions were encoded one by one"


def test_index_health_and_docs(service: ServiceThread, served_workspace: Path) -> None:
    from odqa.storage import Workspace
    from odqa.storage.releases import current_release

    release = current_release(Workspace.resolve(served_workspace))
    info = requests.get(f"{service.url}/index", timeout=10).json()
    assert info["version"] == release.release and info["passages_snapshot"] == release.passages_version
    assert info["index_type"] == "flat" and info["built_at"] == release.created_at and info["passages"] == 150
    assert info["retrievers"] == ["bm25", "dense"] and info["hybrid_alpha"] is None  # hybrid: only once tuned
    health = requests.get(f"{service.url}/health", timeout=10).json()
    assert health["status"] == "ok" and health["version"] == release.release and health["last_error"] is None
    docs = requests.get(f"{service.url}/docs", timeout=10)
    assert docs.status_code == 200 and "/openapi.json" in docs.text
    assert "/search" in requests.get(f"{service.url}/openapi.json", timeout=10).json()["paths"]
    page = requests.get(f"{service.url}/", timeout=10)
    assert page.status_code == 200 and 'id="question"' in page.text


BAD = [
    ({"question": "   "}, 422, "question is empty"),
    ({"question": ""}, 422, "question is empty"),
    ({"question": "x" * 1_000_000}, 422, "1,000,000 characters; the limit is 2,000"),
    ({"question": "x", "k": 0}, 422, "k must be at least 1, got 0"),
    ({"question": "x", "k": -3}, 422, "k must be at least 1, got -3"),
    ({"question": "x", "k": 10_001}, 422, "k=10,001 is over the limit of 10,000 passages per question"),
    ({"question": "x", "retriever": "splade"}, 400, "unknown retriever 'splade'"),
    ({"question": "x", "retriever": "hybrid"}, 400, "has no tuned alpha for this model (odqa tune-hybrid"),
    ({"question": "x", "model": "bert-base-uncased"}, 404, "is not served here"),
    ({"question": "x", "model": "../../etc/passwd"}, 400, "paths are not accepted"),
    ({"question": "x", "model": "/root/model"}, 400, "paths are not accepted"),
    ({"questions": ["q"] * 100_000}, 422, "at most 256 questions, got 100,000"),
    ({"questions": []}, 422, "`questions` is empty"),
    ({"questions": ["q"] * 200, "k": 10_000}, 422, "k x questions = 2,000,000 passages is over the 100,000"),
    ({"question": "x", "questions": ["y"]}, 422, "exactly one of"),
    ({"question": "x", "alpha": -1}, 422, "alpha"),
    ({"question": "x", "retrievr": "bm25"}, 422, "retrievr"),
]


@pytest.mark.parametrize(("body", "status", "message"), BAD, ids=[m[:30] for _, _, m in BAD])
def test_bad_requests_get_a_4xx_with_a_clear_message(service: ServiceThread, body: dict, status: int,
                                                     message: str) -> None:  # fmt: skip
    reply = _search(service, body)
    assert reply.status_code == status, reply.text[:300]
    assert message in reply.json()["error"]


def test_malformed_or_oversized_bodies_are_refused_and_the_service_stays_up(service: ServiceThread) -> None:
    broken = _search(service, '{"question": "Where was')
    assert broken.status_code == 422 and "malformed JSON" in broken.json()["error"]
    assert _search(service, "[1, 2]").status_code == 422
    huge = _search(service, b'{"question": "' + b"a" * 2_000_000 + b'"}')
    assert huge.status_code == 413 and "limit" in huge.json()["error"]
    assert _search(service, {"question": QUESTION}).status_code == 200


def test_a_workspace_without_a_release_answers_503_until_one_appears(tmp_path: Path) -> None:
    with ServiceThread(create_app(Workspace.resolve(tmp_path / "empty").root, poll_s=0.2)) as empty:
        reply = _search(empty, {"question": QUESTION})
        assert reply.status_code == 503 and "build one (odqa bm25 index" in reply.json()["error"]
        assert requests.get(f"{empty.url}/health", timeout=10).json()["status"] == "no_index"
