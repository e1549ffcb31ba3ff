"""REST v1 answers as Anserini's REST server (`io.anserini.api.RestServer`) does: `parse=false`
gives the raw document Lucene stores, `qid` comes back in `query`, and the statuses of Anserini's
cases (405 for another method, 404 for another route, 400 for a bad parameter or index)."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
import requests

from odqa.pipelines.retrieval.bm25 import stored_raw
from odqa.storage import Workspace
from odqa.storage.releases import current_release
from tests.serve.harness import ServiceThread, get

QUESTION = "Where was Marie Curie born?"


@pytest.fixture
def service(served_service: ServiceThread) -> ServiceThread:
    return served_service


def _lucene_raw(workspace: Path, docids: list[str]) -> dict[str, str]:
    """What the release's BM25 index stores as each passage's raw document (Anserini's own reader;
    the service has started the JVM in this process)."""
    from pyserini.pyclass import autoclass

    ws = Workspace.open_existing(workspace)
    release = current_release(ws)
    assert release is not None and release.bm25
    searcher = autoclass("io.anserini.search.SimpleSearcher")(str(ws.indexes_dir / release.bm25))
    try:
        return {docid: searcher.doc(docid).get("raw") for docid in docids}
    finally:
        searcher.close()


def test_stored_raw_is_what_anserini_writes_byte_for_byte() -> None:
    # Anserini 2.3.0 (pyserini 2.4.0's fatjar): IndexCollection -collection JsonCollection -storeRaw
    # over {"id": "p4", "contents": <this text>}, then GET /v1/{index}/doc/p4?parse=false.
    text = "ctl \x01 \x1f \x7f \b \f \r / \\ \u2028 \U0001f600 end"
    anserini = ('{\n  "id" : "p4",\n  "contents" : "T\\nctl \\u0001 \\u001F \x7f \\b \\f \\r / \\\\ \u2028 '
                '\U0001f600 end"\n}')  # fmt: skip
    assert stored_raw("p4", "T", text) == anserini
    assert stored_raw("p2", None, 'say "hi"') == '{\n  "id" : "p2",\n  "contents" : "say \\"hi\\""\n}'


@pytest.mark.parametrize("index", ["bm25", "dense"])
def test_parse_false_gives_the_raw_document_lucene_stores(service: ServiceThread, served_workspace: Path,
                                                          index: str) -> None:  # fmt: skip
    parsed = get(service, f"/v1/{index}/search", query=QUESTION, hits=5).json()["candidates"]
    raw = get(service, f"/v1/{index}/search", query=QUESTION, hits=5, parse="false").json()["candidates"]
    assert [c["docid"] for c in raw] == [c["docid"] for c in parsed]
    stored = _lucene_raw(served_workspace, [c["docid"] for c in raw])
    assert all(isinstance(c["doc"], str) for c in raw)
    assert {c["docid"]: c["doc"] for c in raw} == stored
    assert all(isinstance(c["doc"], dict) for c in parsed)  # parse=true (the default) stays parsed
    docid = raw[0]["docid"]
    for value in ("false", "FALSE", "False"):
        reply = get(service, f"/v1/{index}/doc/{docid}", parse=value)
        assert reply.status_code == 200 and reply.json()["doc"] == stored[docid]
    assert get(service, f"/v1/{index}/doc/{docid}", parse="TRUE").json()["doc"]["title"] == "Marie Curie"


def test_qid_is_echoed_in_the_query(service: ServiceThread) -> None:
    with_qid = get(service, "/v1/bm25/search", query=QUESTION, hits=1, qid="2024-105741").json()
    assert with_qid["query"] == {"text": QUESTION, "qid": "2024-105741"}
    assert get(service, "/v1/bm25/search", query=QUESTION, hits=1).json()["query"] == {"text": QUESTION}


def _send(service: ServiceThread, method: str, path: str, body: bytes | None = None) -> tuple[int, dict, str]:
    """`method` on `path` as curl sends it: without a body, no Content-Length header at all."""
    address = urlsplit(service.url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    try:
        connection.putrequest(method, path)
        if body is not None:
            connection.putheader("Content-Type", "application/json")
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        reply = connection.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read().decode()
    finally:
        connection.close()


@pytest.mark.parametrize(("method", "body"), [("POST", None), ("POST", b'{"query": "x"}'), ("PUT", None),
                                              ("DELETE", None), ("PATCH", None), ("OPTIONS", None)])  # fmt: skip
@pytest.mark.parametrize("path", ["/v1/bm25/search?query=curie", "/v1/bm25/doc/1"])
def test_another_method_gets_405(service: ServiceThread, method: str, body: bytes | None, path: str) -> None:
    status, headers, text = _send(service, method, path, body)
    assert (status, headers.get("allow")) == (405, "GET, HEAD"), text
    assert "only GET is supported" in json.loads(text)["error"]


def test_a_bodiless_post_gets_405_on_v1_and_still_411_on_search(service: ServiceThread) -> None:
    assert _send(service, "POST", "/v1/bm25/search?query=curie")[0] == 405  # Anserini's; it was 411
    status, _, text = _send(service, "POST", "/search")  # the route that reads a body still needs its length
    assert status == 411 and "Content-Length" in text


@pytest.mark.parametrize(("path", "params", "status", "message"), [
    ("/v1/bm25/other", {}, 404, "expected /v1/{index}/search or /v1/{index}/doc/{docid}"),
    ("/v1/bm25", {}, 404, "expected /v1/{index}/search"),
    ("/v1/bm25/search", {"query": QUESTION, "parse": "yes"}, 400, "parse must be 'true' or 'false'"),
    ("/v1/bm25/doc/1", {"parse": ""}, 400, "parse must be 'true' or 'false'"),
    ("/v1/msmarco-passage/search", {"query": QUESTION}, 400, "no index 'msmarco-passage'"),
    ("/v1/msmarco-passage/doc/1", {}, 400, "available: bm25, dense"),
    (f"/v1/bm25/doc/{quote(' ')}", {}, 400, "docid is empty"),
    ("/v1/bm25/doc/no%2Fsuch", {}, 404, "no passage 'no/such'"),
    ("/v1/bm25/search", {"query": QUESTION, "qid": "a\x07b"}, 400, "qid has a control character"),
])  # fmt: skip
def test_statuses_follow_anserini(service: ServiceThread, path: str, params: dict, status: int, message: str) -> None:
    reply = get(service, path, **params)
    assert reply.status_code == status and set(reply.json()) == {"error"}, reply.text
    assert message in reply.json()["error"]


def test_hits_reads_as_java_reads_an_int(service: ServiceThread) -> None:
    reply = get(service, "/v1/bm25/search", query=QUESTION, hits="+2")
    assert reply.status_code == 200 and len(reply.json()["candidates"]) == 2


def test_head_answers_as_get(service: ServiceThread) -> None:
    for path in ("/v1/bm25/search", "/v1/bm25/doc/1023_0"):
        reply = requests.head(f"{service.url}{path}", params={"query": QUESTION}, timeout=60)
        assert reply.status_code == 200 and reply.headers["content-type"] == "application/json" and not reply.content
