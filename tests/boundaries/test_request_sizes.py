"""Every request to `odqa serve` has a size (issue 41): an over-long URL gets 414 and over-large
headers 431, answered before the rest is read, and `k`/`hits` are bounded by the one limit every
search shares (`ODQA_MAX_K`).

The app runs over an empty workspace: every probe is decided at the edge, before a release is
needed (a request that passes the edge gets 503, "no index published")."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator

import pytest
import requests

from odqa.service.app import create_app
from odqa.storage import Workspace
from tests.serve.harness import ServiceThread


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceThread]:
    app = create_app(Workspace.resolve(tmp_path_factory.mktemp("sizes") / "ws").root, poll_s=0.2)
    with ServiceThread(app) as running:
        yield running


def _port(service: ServiceThread) -> int:
    return int(service.url.rsplit(":", 1)[1])


def _read_reply(sock: socket.socket, timeout_s: float = 10.0) -> tuple[int, dict]:
    """The status and JSON body of the one answer on `sock` (the service closes after a refusal)."""
    sock.settimeout(timeout_s)
    reply = b""
    while b"\r\n\r\n" not in reply or len(reply.partition(b"\r\n\r\n")[2]) < _length(reply):
        chunk = sock.recv(65536)
        if not chunk:
            break
        reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body[:_length(reply)])


def _length(reply: bytes) -> int:
    for line in reply.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 1 << 30


def _raw(service: ServiceThread, request: bytes) -> tuple[int, dict]:
    with socket.create_connection(("127.0.0.1", _port(service))) as sock:
        sock.sendall(request)
        return _read_reply(sock)


def test_an_over_long_url_gets_414_not_another_document(service: ServiceThread) -> None:
    # The URL parser's offsets are 16-bit: 65,536 more bytes wrapped to "/v1/bm25/doc/1".
    status, body = _raw(service, b"GET /v1/bm25/doc/1" + b"0" * 65_536 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 414 and "8,192-byte limit" in body["error"], body
    assert requests.get(f"{service.url}/health", timeout=10).status_code == 200


def test_a_10_mb_header_gets_431_before_it_is_read(service: ServiceThread) -> None:
    """The answer comes while the client is still sending: the service read about the limit's
    worth of the head, not 10 MB, and kept none of it."""
    total, chunk = 10 * 2**20, b"a" * 65_536
    sent = 0
    with socket.create_connection(("127.0.0.1", _port(service))) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
        sock.setblocking(False)
        deadline = time.monotonic() + 30
        while sent < total and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock], [], 1.0)
            if readable:
                break
            if writable:
                try:
                    sent += sock.send(chunk)
                except BlockingIOError:
                    continue
        if sent >= total:
            sock.setblocking(True)
            sock.sendall(b"\r\n\r\n")
        sock.setblocking(True)
        status, body = _read_reply(sock)
    assert status == 431 and "65,536-byte limit" in body["error"], (status, body)
    assert sent < total // 2, f"the answer came only after {sent:,} of {total:,} header bytes were sent"


@pytest.mark.parametrize(("headers", "message"), [
    ([f"X-H{i}: v" for i in range(150)], "more than 100 header fields"),
    ([f"X-H{i}: {'v' * 2000}" for i in range(40)], "65,536-byte limit"),
], ids=["150 fields", "40 fields of 2 KB"])  # fmt: skip
def test_too_many_or_too_large_headers_get_431(service: ServiceThread, headers: list[str], message: str) -> None:
    status, body = _raw(service, ("GET /health HTTP/1.1\r\nHost: x\r\n" + "\r\n".join(headers) + "\r\n\r\n").encode())
    assert status == 431 and message in body["error"], body


def test_the_head_limits_are_settings(tmp_path_factory: pytest.TempPathFactory) -> None:
    app = create_app(Workspace.resolve(tmp_path_factory.mktemp("limits") / "ws").root, poll_s=0.2)
    with ServiceThread(app, max_url_bytes=1024, max_header_bytes=4096, max_headers=10) as small:
        url = f"{small.url}/v1/bm25/search?query="
        assert requests.get(url + "x" * 900, timeout=10).status_code == 503  # within: past the edge
        refused = requests.get(url + "x" * 1500, timeout=10)
        assert refused.status_code == 414 and "1,024-byte limit" in refused.json()["error"]
        assert requests.get(f"{small.url}/health", headers={"X-A": "v" * 5000}, timeout=10).status_code == 431
        many = {f"X-H{i}": "v" for i in range(12)}
        assert requests.get(f"{small.url}/health", headers=many, timeout=10).status_code == 431
        assert requests.get(f"{small.url}/health", timeout=10).status_code == 200


def test_k_and_hits_follow_the_one_limit(service: ServiceThread, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODQA_MAX_K", "50")
    reply = requests.post(f"{service.url}/search", json={"question": "Where was Marie Curie born?", "k": 51},
                          timeout=10)  # fmt: skip
    assert reply.status_code == 422 and "over the limit of 50" in reply.json()["error"], reply.text
    assert "ODQA_MAX_K" in reply.json()["error"]
    reply = requests.get(f"{service.url}/v1/bm25/search", params={"query": "Curie", "hits": 51}, timeout=10)
    assert reply.status_code == 400 and "hits=51 is over the limit of 50" in reply.json()["error"], reply.text
    within = requests.post(f"{service.url}/search", json={"question": "Curie", "k": 50}, timeout=10)
    assert within.status_code == 503  # past the edge: this workspace has no release
