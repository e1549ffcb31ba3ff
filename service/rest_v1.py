"""REST v1: the routes of Anserini's REST server (``io.anserini.api.RestServer``), beside the
service's own routes, answering as that server does (docs/interop.md lists each parameter and
status beside Anserini's).

* ``GET /v1/{index}/search?query=...&hits=10&parse=true&qid=`` answers
  ``{"api": "v1", "index", "version", "query": {"text", "qid"?}, "candidates": [{"docid", "score", "rank", "doc"}]}``
* ``GET /v1/{index}/doc/{docid}?parse=true`` answers ``{"api": "v1", "index", "version", "docid", "doc"}``

`{index}` names a retriever of the current release: ``bm25``, ``dense``, ``hybrid``, or the
served dense model's name (its dense index). Hybrid takes the model's tuned alpha, or ``&alpha=``
(an odqa addition, as in ``POST /search``). ``doc`` is the passage as a parsed JSON document,
``{"title", "text", "contents"}`` (contents: title, newline, text, the field pyserini's Wikipedia
indexes hold and odqa's BM25 index stores); with ``parse=false`` it is the raw document string
Anserini stores for the passage (`pipelines.retrieval.bm25.stored_raw`), byte for byte.
``qid`` (a parameter of Anserini's earlier REST API, whose answers carried it as ``query.qid``,
as its reranker requests do) is echoed when given.

Errors are ``{"error": message}`` with Anserini's statuses: 400 for a bad parameter or an index
the release does not have, 404 for an unknown docid or route, 405 for any method but GET on the
two routes (without reading a body, as Anserini's OpenAPI description states), and 503 (odqa's)
while nothing is published. ``version`` names the index release that answered, as the service's
own routes do.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..pipelines.retrieval.bm25 import passage_contents, stored_raw
from ..pipelines.search.hits import Ranked
from ..pipelines.search.limits import checked_k
from ..storage.choices import RETRIEVER_KINDS
from .releases import LoadedRelease, ReleaseHolder, model_display_name
from .validation import checked_percent_encoding, checked_text

# (release, retriever, questions, k, alpha) -> per question its (passage_id, score) hits, best first
SearchFn = Callable[[LoadedRelease, str, list[str], int, float | None], Awaitable[list[Ranked]]]
MAX_ALPHA = 100.0
MAX_QID_CHARS = 200
ROUTES = "/v1/{index}/search or /v1/{index}/doc/{docid}"
# Every method but GET and HEAD (Anserini's server answers HEAD as GET): answered 405 on the two routes.
OTHER_METHODS = ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
_HITS = re.compile(r"[+-]?[0-9]{1,19}")  # what Java's Integer.parseInt reads, before the range check


class RestError(Exception):
    """A REST v1 request that cannot be answered as asked."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message})


def _indexes(release: LoadedRelease) -> list[str]:
    """The names `{index}` may take for this release."""
    model = [model_display_name(release.model)] if "dense" in release.retrievers and release.model else []
    return [*release.retrievers, *model]


def retriever_of(index: str, release: LoadedRelease) -> str:
    """The retriever `{index}` names in this release; 400 when it names none (Anserini: "Unable to
    open index")."""
    if index in RETRIEVER_KINDS and index in release.retrievers:
        return index
    if "dense" in release.retrievers and release.model and index in {release.model,
                                                                     model_display_name(release.model)}:  # fmt: skip
        return "dense"
    raise RestError(400, f"no index {index[:80]!r} in index version {release.release}; "
                         f"available: {', '.join(_indexes(release)) or 'none'}")  # fmt: skip


def _hits(text: str) -> int:
    if not _HITS.fullmatch(text) or int(text) < 1:
        raise RestError(400, f"hits must be a whole number of at least 1, got {text[:20]!r}")
    try:
        return checked_k(int(text), "hits")
    except ValueError as refusal:
        raise RestError(400, str(refusal)) from None


def _alpha(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        alpha = float(text)
    except ValueError:
        alpha = -1.0
    if not 0.0 <= alpha <= MAX_ALPHA:
        raise RestError(400, f"alpha must be a number between 0 and {MAX_ALPHA:g}, got {text[:20]!r}")
    return alpha


def _parse(text: str | None) -> bool:
    """Anserini's ``parse``: true (the default) or false, in any letter case."""
    if text is None or text.lower() == "true":
        return True
    if text.lower() == "false":
        return False
    raise RestError(400, f"parse must be 'true' or 'false', got {text[:20]!r}")


def _query(text: str, qid: str | None) -> dict[str, str]:
    """The ``query`` object of an answer: its text, and its ``qid`` when the request named one."""
    if qid is None:
        return {"text": text}
    try:
        return {"text": text, "qid": checked_text(qid, "qid", limit=MAX_QID_CHARS)}
    except ValueError as refusal:
        raise RestError(400, str(refusal)) from None


def _utf8(raw: bytes, where: str) -> None:
    """400 unless the URL part `raw` percent-decodes to UTF-8 (`service.validation`)."""
    try:
        checked_percent_encoding(raw, where)
    except ValueError as refusal:
        raise RestError(400, str(refusal)) from None


def _doc(docid: str, title: str | None, text: str | None, parse: bool) -> dict[str, Any] | str:
    """The passage parsed (its fields, and `contents` as the BM25 index stores it) or raw."""
    if not parse:
        return stored_raw(docid, title, text)
    return {"title": title, "text": text, "contents": passage_contents(title, text)}


def rest_v1_router(holder: ReleaseHolder, search: SearchFn, *, max_query_chars: int) -> APIRouter:
    """The /v1 routes over `holder`'s current release, searching with `search` (the service's own
    micro-batched search, so both shapes give the same hits)."""
    router = APIRouter(prefix="/v1", tags=["REST v1 (Anserini / pyserini shape)"])

    @router.api_route("/{index}/search", methods=["HEAD"], include_in_schema=False)
    @router.get("/{index}/search")
    async def search_v1(request: Request, index: str, query: str | None = None, hits: str = "10",
                        parse: str | None = None, qid: str | None = None, alpha: str | None = None) -> Response:  # fmt: skip
        """Top `hits` passages of `query` from the `{index}` retriever (hybrid: `alpha` weighs BM25);
        `parse=false` gives each passage as its raw stored document; `qid` is echoed in `query`."""
        try:
            _utf8(request.scope.get("query_string", b""), "the query string")
            if query is None:
                raise RestError(400, "give the query as ?query=... (it is missing)")
            try:
                checked_text(query, "query", limit=max_query_chars)
            except ValueError as refusal:
                raise RestError(400, str(refusal)) from None
            k, parsed, echoed, weight = _hits(hits), _parse(parse), _query(query, qid), _alpha(alpha)
            with holder.lease() as release:
                ranked = (await search(release, retriever_of(index, release), [query], k, weight))[0]
                candidates = [{"docid": pid, "score": score, "rank": rank,
                               "doc": _doc(pid, *release.passage(pid), parsed)}
                              for rank, (pid, score) in enumerate(ranked, start=1)]  # fmt: skip
                payload = {"api": "v1", "index": index, "version": release.release, "query": echoed,
                           "candidates": candidates}  # fmt: skip
        except RestError as error:
            return _error(error.status, str(error))
        return Response(content=orjson.dumps(payload), media_type="application/json")

    @router.api_route("/{index}/doc/{docid:path}", methods=["HEAD"], include_in_schema=False)
    @router.get("/{index}/doc/{docid:path}")
    async def doc_v1(request: Request, index: str, docid: str, parse: str | None = None) -> Response:
        """The passage `docid` of the release `{index}` belongs to (`parse=false`: its raw stored
        document). A docid may hold `/` (sent as %2F or as it is)."""
        try:
            _utf8(request.scope.get("raw_path", b""), "the path")
            if not docid.strip():
                raise RestError(400, "docid is empty")
            parsed = _parse(parse)
            with holder.lease() as release:
                retriever_of(index, release)
                title, text = release.passage(docid)
                if title is None and text is None:
                    raise RestError(404, f"no passage {docid[:80]!r} in index version {release.release}")
                payload = {"api": "v1", "index": index, "version": release.release, "docid": docid,
                           "doc": _doc(docid, title, text, parsed)}  # fmt: skip
        except RestError as error:
            return _error(error.status, str(error))
        return Response(content=orjson.dumps(payload), media_type="application/json")

    @router.api_route("/{index}/search", methods=OTHER_METHODS, include_in_schema=False)
    @router.api_route("/{index}/doc/{docid:path}", methods=OTHER_METHODS, include_in_schema=False)
    async def other_method_v1() -> Response:
        """Any method but GET: 405, as Anserini documents it (the service never reads the body)."""
        return JSONResponse(status_code=405, content={"error": "only GET is supported on the /v1 routes"},
                            headers={"allow": "GET, HEAD"})  # fmt: skip

    @router.api_route("/{path:path}", methods=["GET", "HEAD", *OTHER_METHODS], include_in_schema=False)
    async def unknown_route_v1(path: str) -> Response:
        """Any other path under /v1/: 404 naming the two routes, as Anserini answers."""
        return _error(404, f"no route /v1/{path[:80]}; expected {ROUTES}")

    return router
