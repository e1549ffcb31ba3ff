"""REST v1: Anserini's and pyserini's REST shape, beside the service's own routes.

* ``GET /v1/{index}/search?query=...&hits=10`` answers
  ``{"api": "v1", "index", "version", "query": {"text"}, "candidates": [{"docid", "score", "rank", "doc"}]}``
* ``GET /v1/{index}/doc/{docid}`` answers ``{"api": "v1", "index", "version", "docid", "doc"}``

`{index}` names a retriever of the current release: ``bm25``, ``dense``, ``hybrid``, or the
served dense model's name (its dense index). Hybrid takes the model's tuned alpha, or ``&alpha=``
(an odqa addition, as in ``POST /search``). ``doc`` is the passage as Anserini returns a parsed
JSON document: ``{"title", "text", "contents"}`` (contents: title, newline, text, the field
pyserini's own Wikipedia indexes hold). Errors are ``{"error": message}`` with 400 (bad
parameters), 404 (unknown index or docid) or 503 (nothing published yet), as in Anserini's
OpenAPI description; ``version`` names the index release that answered, as the service's own
routes do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from ..pipelines.search.hits import Ranked
from ..pipelines.search.limits import checked_k
from ..storage.choices import RETRIEVER_KINDS
from .releases import LoadedRelease, ReleaseHolder, model_display_name
from .validation import checked_text

# (release, retriever, questions, k, alpha) -> per question its (passage_id, score) hits, best first
SearchFn = Callable[[LoadedRelease, str, list[str], int, float | None], Awaitable[list[Ranked]]]
MAX_ALPHA = 100.0


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
    """The retriever `{index}` names in this release; 404 when it names none."""
    if index in RETRIEVER_KINDS and index in release.retrievers:
        return index
    if "dense" in release.retrievers and release.model and index in {release.model,
                                                                     model_display_name(release.model)}:  # fmt: skip
        return "dense"
    raise RestError(404, f"no index {index[:80]!r} in index version {release.release}; "
                         f"available: {', '.join(_indexes(release)) or 'none'}")  # fmt: skip


def _hits(text: str) -> int:
    if not text.strip().isdigit() or len(text) > 20 or int(text) < 1:
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


def _doc(title: str | None, text: str | None) -> dict[str, Any]:
    return {"title": title, "text": text, "contents": f"{title or ''}\n{text or ''}"}


def rest_v1_router(holder: ReleaseHolder, search: SearchFn, *, max_query_chars: int) -> APIRouter:
    """The /v1 routes over `holder`'s current release, searching with `search` (the service's own
    micro-batched search, so both shapes give the same hits)."""
    router = APIRouter(prefix="/v1", tags=["REST v1 (Anserini / pyserini shape)"])

    @router.get("/{index}/search")
    async def search_v1(index: str, query: str | None = None, hits: str = "10", alpha: str | None = None) -> Response:
        """Top `hits` passages of `query` from the `{index}` retriever (hybrid: `alpha` weighs BM25)."""
        try:
            if query is None:
                raise RestError(400, "give the query as ?query=... (it is missing)")
            try:
                checked_text(query, "query", limit=max_query_chars)
            except ValueError as refusal:
                raise RestError(400, str(refusal)) from None
            k, weight = _hits(hits), _alpha(alpha)
            with holder.lease() as release:
                ranked = (await search(release, retriever_of(index, release), [query], k, weight))[0]
                candidates = [{"docid": pid, "score": score, "rank": rank, "doc": _doc(*release.passage(pid))}
                              for rank, (pid, score) in enumerate(ranked, start=1)]  # fmt: skip
                payload = {"api": "v1", "index": index, "version": release.release, "query": {"text": query},
                           "candidates": candidates}  # fmt: skip
        except RestError as error:
            return _error(error.status, str(error))
        return Response(content=orjson.dumps(payload), media_type="application/json")

    @router.get("/{index}/doc/{docid}")
    async def doc_v1(index: str, docid: str) -> Response:
        """The passage `docid` of the release `{index}` belongs to."""
        try:
            with holder.lease() as release:
                retriever_of(index, release)
                title, text = release.passage(docid)
                if title is None and text is None:
                    raise RestError(404, f"no passage {docid[:80]!r} in index version {release.release}")
                payload = {"api": "v1", "index": index, "version": release.release, "docid": docid,
                           "doc": _doc(title, text)}  # fmt: skip
        except RestError as error:
            return _error(error.status, str(error))
        return Response(content=orjson.dumps(payload), media_type="application/json")

    return router
