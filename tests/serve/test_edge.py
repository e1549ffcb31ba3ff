"""Issue 28: a malformed request fails alone. Sent at the same time as valid requests, over a real
release, it gets a 4xx ``{"error": ...}`` while every valid request gets 200 with the right answer;
the workspace is byte-for-byte unchanged afterwards."""

from __future__ import annotations

import hashlib
import itertools
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from odqa.service.app import create_app
from tests.serve.harness import ServiceThread
from tests.serve.hostile_requests import REFUSED

VALID = {"Where was Marie Curie born?": "Marie Curie", "Which river flows through Zurich?": "Zürich"}


def _fingerprint(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "prefect" not in p.parts}  # fmt: skip


def _post(url: str, body: str) -> requests.Response:
    return requests.post(f"{url}/search", data=body.encode(), headers={"Content-Type": "application/json"}, timeout=60)


@pytest.mark.parametrize("retriever", ["dense", "bm25"])
def test_malformed_requests_among_valid_ones_fail_alone(served_workspace: Path, retriever: str) -> None:
    before = _fingerprint(served_workspace)
    valid = [json.dumps({"question": q, "k": 5, "retriever": retriever}) for q in VALID] * 6
    bad = [body for body, _ in REFUSED]
    mixed = [body for pair in itertools.zip_longest(valid, bad) for body in pair if body is not None]
    with ServiceThread(create_app(served_workspace, poll_s=0.2)) as service, ThreadPoolExecutor(26) as pool:
        for _ in range(3):  # rounds of 12 valid + 12 malformed at once: they share micro-batches
            replies = list(pool.map(lambda body: _post(service.url, body), mixed))
            for body, reply in zip(mixed, replies, strict=True):
                if body in valid:
                    question = json.loads(body)["question"]
                    assert reply.status_code == 200, (body, reply.text[:300])
                    titles = [h["title"] for h in reply.json()["results"][0]["hits"]]
                    assert VALID[question] in titles, (question, titles)
                else:
                    assert 400 <= reply.status_code < 500 and set(reply.json()) == {"error"}, (body, reply.text)
        health = requests.get(f"{service.url}/health", timeout=10).json()
    assert health["status"] == "ok" and health["last_error"] is None
    assert _fingerprint(served_workspace) == before
