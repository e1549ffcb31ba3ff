"""Hostile requests at `odqa serve`'s edge (issue 28): each is refused with a 4xx and the
service's one error shape, ``{"error": ...}``, before anything behind the edge sees it.

The app runs over an empty workspace: every probe here is decided before a release is needed
(tests/serve/test_edge.py sends the same probes between valid requests over a real release)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from odqa.service.app import create_app
from odqa.service.body_budget import BodyBudget
from odqa.storage import Workspace
from tests.serve.harness import ServiceThread
from tests.serve.hostile_requests import REFUSED

TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceThread]:
    ws = Workspace.resolve(tmp_path_factory.mktemp("edge") / "ws")
    app = create_app(ws.root, poll_s=0.2, body_timeout_s=TIMEOUT_S)
    with ServiceThread(app, header_timeout_s=TIMEOUT_S) as running:
        yield running


def _post(service: ServiceThread, body: bytes | str, path: str = "/search") -> requests.Response:
    return requests.post(f"{service.url}{path}", data=body, headers={"Content-Type": "application/json"}, timeout=10)


def _error(reply: requests.Response) -> str:
    """The message of a refusal, asserting the service's shape: JSON with exactly one key, `error`."""
    assert reply.headers["content-type"].startswith("application/json"), (reply.status_code, reply.text[:200])
    body = reply.json()
    assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"], body
    return body["error"]


@pytest.mark.parametrize(("body", "message"), REFUSED, ids=[m[:40] for _, m in REFUSED])
def test_bad_strings_and_loose_types_get_422_with_the_error_shape(service: ServiceThread, body: str,
                                                                  message: str) -> None:  # fmt: skip
    reply = _post(service, body)
    assert reply.status_code == 422, reply.text[:300]
    assert message in _error(reply)


def test_a_tab_or_newline_in_a_question_is_plain_text(service: ServiceThread) -> None:
    # Passes the edge; refused only because this workspace has no release yet (503, same shape).
    reply = _post(service, json.dumps({"question": "Where was\tMarie Curie\nborn?"}))
    assert reply.status_code == 503 and "no index" in _error(reply).lower()


def test_a_non_utf8_body_gets_the_error_shape(service: ServiceThread) -> None:
    reply = _post(service, b'{"question": "caf\xe9"}')
    assert reply.status_code == 400 and "not UTF-8 (byte 17" in _error(reply)


@pytest.mark.parametrize(("method", "path", "status"), [("GET", "/nowhere", 404), ("GET", "/search", 405),
                                                        ("DELETE", "/health", 405)])  # fmt: skip
def test_unknown_routes_and_methods_get_the_error_shape(service: ServiceThread, method: str, path: str,
                                                        status: int) -> None:  # fmt: skip
    reply = requests.request(method, f"{service.url}{path}", timeout=10)
    assert reply.status_code == status and _error(reply)


def test_docs_work_offline(service: ServiceThread) -> None:
    page = requests.get(f"{service.url}/docs", timeout=10)
    assert page.status_code == 200 and 'fetch("/openapi.json")' in page.text
    assert "<script src" not in page.text and "<link" not in page.text, "the docs page loads something from elsewhere"
    assert requests.get(f"{service.url}/redoc", timeout=10).status_code == 404
    assert "/search" in requests.get(f"{service.url}/openapi.json", timeout=10).json()["paths"]


def _closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the service closed ``sock`` (reading EOF), None when it was still open."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def test_slow_header_sockets_are_closed(service: ServiceThread) -> None:
    port = int(service.url.rsplit(":", 1)[1])
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    try:
        for sock in sockets:
            sock.sendall(b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never complete
        closed = [_closed_within(sock, TIMEOUT_S + 4) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
    assert all(c is not None for c in closed), f"{closed.count(None)} of 20 slow-header sockets still open"
    assert requests.get(f"{service.url}/health", timeout=10).status_code == 200


def test_a_slow_header_after_a_first_request_on_a_kept_alive_connection_is_closed(service: ServiceThread) -> None:
    port = int(service.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /health HTTP/1.1\r\n")  # the second request's headers never complete
        assert _closed_within(sock, TIMEOUT_S + 4) is not None


def test_a_body_that_never_arrives_gets_408_and_the_connection_closed(service: ServiceThread) -> None:
    port = int(service.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"question\": ")  # fmt: skip
        sock.settimeout(TIMEOUT_S + 4)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower(), reply[:300]
    assert "did not arrive within 1 s" in json.loads(body)["error"]



MALFORMED_HEADS = [
    (b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
     "Transfer-Encoding can't be present with Content-Length"),
    (b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 20\r\n\r\n{}",
     "Duplicate Content-Length"),
    (b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n{}", "Invalid character in Content-Length"),
    (b"POST /health HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzzzz\r\n",
     "Invalid character in chunk size"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(64)), "Invalid method"),  # a TLS hello
]


@pytest.mark.parametrize(("request_bytes", "reason"), MALFORMED_HEADS, ids=[r for _, r in MALFORMED_HEADS])
def test_bytes_the_http_parser_rejects_get_400_with_the_error_shape(service: ServiceThread, request_bytes: bytes,
                                                                    reason: str) -> None:  # fmt: skip
    """uvicorn answered these in plain text ("Invalid HTTP request received."), not ``{"error": ...}``."""
    port = int(service.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request_bytes)
        sock.settimeout(10)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"content-type: application/json" in head.lower(), reply[:300]
    assert b"connection: close" in head.lower()
    message = json.loads(body)["error"]
    assert message.startswith("malformed HTTP request: ") and reason in message, message
    assert requests.get(f"{service.url}/health", timeout=10).status_code == 200


def _reply(sock: socket.socket, seconds: float) -> bytes:
    sock.settimeout(seconds)
    reply = b""
    try:
        while chunk := sock.recv(65536):
            reply += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return reply


def test_large_bodies_held_at_once_share_one_budget_and_small_requests_still_get_in(tmp_path: Path) -> None:
    """Nothing bounded the sum of bodies: 1,500 connections each sending 900 KB of an unfinished
    body added 1.4 GB to the service. A large body that would go over the budget gets 503 before
    it is read; a small request is answered meanwhile; the budget is lent again once a body's
    request has ended (here: its 408)."""
    ws = Workspace.resolve(tmp_path / "ws")
    app = create_app(ws.root, poll_s=0.2, body_timeout_s=TIMEOUT_S * 2, bodies=BodyBudget(limit=300_000, small=10_000))
    head = (b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 200000\r\n\r\n")  # fmt: skip
    with ServiceThread(app, header_timeout_s=TIMEOUT_S * 4) as service:
        port = int(service.url.rsplit(":", 1)[1])
        first = socket.create_connection(("127.0.0.1", port))
        second = socket.create_connection(("127.0.0.1", port))
        try:
            first.sendall(head + b" " * 100_000)  # half of its body, never the rest: holds 200,000 bytes
            time.sleep(0.5)
            second.sendall(head + b" " * 1000)
            refused = _reply(second, TIMEOUT_S)
            started = time.monotonic()
            small = _post(service, '{"question": ""}')  # a small body: no budget needed
            assert small.status_code == 422 and time.monotonic() - started < TIMEOUT_S, small.text
            held = _reply(first, TIMEOUT_S * 4)
        finally:
            first.close()
            second.close()
        status, _, body = refused.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in status.lower(), refused[:300]
        assert "already reading 200,000 bytes of request bodies" in json.loads(body)["error"]
        assert held.startswith(b"HTTP/1.1 408"), held[:200]
        with socket.create_connection(("127.0.0.1", port)) as third:  # the first one's bytes are lent again
            third.sendall(head + b'{"question": ""}' + b" " * (200_000 - 16))
            assert _reply(third, TIMEOUT_S * 4).startswith(b"HTTP/1.1 422")


def test_a_body_budget_needs_a_positive_limit() -> None:
    with pytest.raises(ValueError, match="limit >= 1"):
        BodyBudget(limit=0)


@pytest.mark.parametrize("url", ["/v1/bm25/search?query=Curie%E9", "/v1/bm25/search?query=x&qid=%ff",
                                 "/v1/bm25/search?query=%ed%a0%80", "/v1/bm25/doc/1023%ff"])  # fmt: skip
def test_a_url_that_is_not_utf8_once_percent_decoded_gets_400(service: ServiceThread, url: str) -> None:
    """Starlette decodes query strings and paths with errors="replace": before, a Latin-1 query
    searched for 'Curie\\ufffd' and answered 200 (here, with no release yet: 503)."""
    reply = requests.get(f"{service.url}{url}", timeout=10)
    assert reply.status_code == 400, reply.text
    assert "is not UTF-8 once percent-decoded (byte " in _error(reply)


def test_percent_encoded_utf8_and_plus_signs_still_pass(service: ServiceThread) -> None:
    reply = requests.get(f"{service.url}/v1/bm25/search?query=Sk%C5%82odowska+Curie%20%F0%9F%A7%AA", timeout=10)
    assert reply.status_code == 503 and "no index published" in _error(reply)  # past the edge: no release yet
