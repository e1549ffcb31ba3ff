"""`odqa serve`: an HTTP search service over the workspace's published indexes.

`create_app` builds the FastAPI app (tests run it on 127.0.0.1 with an ephemeral port):

* ``POST /search`` -- one question or a batch; k, retriever (bm25 | dense | hybrid), alpha.
  Each response names the index version (release id) that answered it.
* ``GET /health`` -- the loaded version, in-flight requests, releases being retired, the last
  load failure (a release that failed to load is reported here; the old one keeps serving), what
  it serves and why (`serves`: retrievers, models, the pinned default), and a release withheld
  because it would have narrowed what serves (`withheld`). The service registers itself in the
  workspace while it runs (`storage.serving`), so no publish takes a retriever away from it.
* ``GET /index`` -- model, index type, passages snapshot, built_at, version.
* ``GET /v1/{index}/search``, ``GET /v1/{index}/doc/{docid}`` -- Anserini's and pyserini's REST
  shape (`service.rest_v1`).
* ``GET /`` -- a small search page (static/search.html); ``/docs`` -- the API, rendered from
  ``/openapi.json`` by static/docs.html (works offline).

The releases and the hot swap live in `service.releases`; question encoding and the FAISS
search are micro-batched across concurrent requests (`pipelines.microbatch`). Requests are
validated at the edge (`RequestLimits`, strict pydantic models, `service.validation`; header
deadlines and sizes in `service.connections`); a bad request gets a 4xx ``{"error": ...}`` (the one shape
of every refusal and failure) and never affects other requests (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..pipelines.dense.hybrid import DEFAULT_DEPTH
from ..pipelines.search.hits import Hits, Ranked
from ..pipelines.search.hybrid_searcher import fused_hits
from ..pipelines.search.limits import DEFAULT_MAX_K, MAX_K_ENV, checked_k, max_k
from ..storage import Workspace
from ..storage.choices import INDEX_TYPES, RETRIEVER_KINDS, IndexType, RetrieverKind
from ..storage.releases import NoReleaseError
from ..storage.serving import this_service
from .body_budget import BodyBudget
from .releases import BatchSettings, LoadedRelease, ReleaseHolder, model_display_name
from .rest_v1 import rest_v1_router
from .validation import MAX_QUESTION_CHARS, checked_text

log = logging.getLogger("odqa.serve")

MAX_BATCH = 256
MAX_BODY_BYTES = 1_048_576
BODY_ROUTES = frozenset({"/search"})  # the routes that read a request body (POST /search)
MAX_HITS = 100_000  # k x questions of one request: bounds the answer (passage texts included)
PAGE = Path(__file__).resolve().parent / "static" / "search.html"
DOCS_PAGE = PAGE.with_name("docs.html")
BODY_TIMEOUT_S = 10.0  # the whole body, from the end of the headers (service.connections times the headers)
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")


class ClientError(Exception):
    """A request the service understood but cannot answer as asked (400/404/503)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# --- request and response models ---------------------------------------------------------------


class SearchRequest(BaseModel):
    """One question (`question`) or a batch (`questions`), top `k` passages each.

    Strict: `k` is a JSON integer (not "5", not true), strings are JSON strings, unknown fields are
    refused; every question passes `service.validation.checked_text`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    question: str | None = Field(None, description="One question (or use `questions`).")
    questions: list[str] | None = Field(None, description=f"A batch of at most {MAX_BATCH} questions.")
    k: int = Field(10, description=f"Passages per question, 1..{DEFAULT_MAX_K:,} (the service's {MAX_K_ENV} may "
                                   "set another limit).")
    retriever: str | None = Field(None, description="bm25, dense or hybrid (default: the service's).")
    alpha: float | None = Field(None, ge=0.0, le=100.0, description="Hybrid weight of BM25 (dense + alpha * bm25).")
    model: str | None = Field(None, description="Model id; must be the one the index was built with.")

    @field_validator("k")
    @classmethod
    def _k_in_range(cls, k: int) -> int:
        return checked_k(k)

    @field_validator("questions", mode="before")
    @classmethod
    def _batch_size(cls, value: Any) -> Any:
        if isinstance(value, list) and len(value) > MAX_BATCH:
            raise ValueError(f"a batch holds at most {MAX_BATCH} questions, got {len(value):,}; split it")
        return value

    @field_validator("retriever", "model")
    @classmethod
    def _short_name(cls, value: str | None) -> str | None:
        return None if value is None else checked_text(value, "the name", limit=200)

    @model_validator(mode="after")
    def _questions(self) -> SearchRequest:
        if (self.question is None) == (self.questions is None):
            raise ValueError("give exactly one of `question` (one string) or `questions` (a list)")
        for number, text in enumerate(self.all_questions()):
            checked_text(text, "question" if self.question is not None else f"questions[{number}]")
        if self.questions is not None and not self.questions:
            raise ValueError("`questions` is empty")
        hits = self.k * len(self.all_questions())
        if hits > MAX_HITS:
            raise ValueError(f"k x questions = {hits:,} passages is over the {MAX_HITS:,} one request may ask for; "
                             "lower k or split the batch")  # fmt: skip
        return self

    def all_questions(self) -> list[str]:
        return [self.question] if self.question is not None else list(self.questions or [])


class Hit(BaseModel):
    rank: int
    passage_id: str
    score: float
    title: str | None
    text: str | None


class QuestionResult(BaseModel):
    question: str
    hits: list[Hit]


class SearchResponse(BaseModel):
    version: str = Field(description="The index release that answered (every hit comes from it).")
    retriever: str
    model: str | None
    k: int
    alpha: float | None = None
    results: list[QuestionResult]
    took_ms: float


# --- the app ---------------------------------------------------------------------------------


class Arrivals:
    """Search requests that have arrived but not yet reached a batcher: the batchers' reason to wait."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        return self._count

    def add(self, n: int) -> None:
        with self._lock:
            self._count += n


class RequestLimits:
    """ASGI middleware: the edge every request passes before any route sees it.

    * refuses oversized bodies before reading them (413), and unsized ones where a route reads a
      body (411; any other route answers its own 404 or 405, as the REST v1 routes must);
    * refuses a large body while other large bodies hold the service's shared budget (503 with
      Retry-After, before it is read; `service.body_budget`): the sum of bodies held is bounded;
    * reads the body within ``body_timeout_s`` (408 and the connection closed after it: a client
      trickling a body must not hold a request open), and refuses one that is not UTF-8 (400);
    * counts search requests whose body has arrived (`Arrivals`, the micro-batchers' reason to wait).

    Plain ASGI rather than Starlette's BaseHTTPMiddleware, which costs every request a task group
    and a memory stream."""

    def __init__(self, app: Any, arrivals: Arrivals, body_timeout_s: float, bodies: BodyBudget | None = None) -> None:
        self.app = app
        self.arrivals = arrivals
        self.body_timeout_s = body_timeout_s
        self.bodies = bodies or BodyBudget()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is None and scope["method"] == "POST" and scope["path"] in BODY_ROUTES:
            return await error_response(411, "send a Content-Length header (no chunked bodies)")(scope, receive, send)
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return await error_response(413, f"request body of {length.decode(errors='replace')[:20]} bytes is over "
                                             f"the {MAX_BODY_BYTES:,}-byte limit")(scope, receive, send)  # fmt: skip
        lent = 0
        if length is not None and int(length) > 0:
            lent = self.bodies.take(int(length))
            if lent is None:
                return await error_response(503, self.bodies.refusal(int(length)),
                                            headers={"retry-after": "1", "connection": "close"})(scope, receive, send)  # fmt: skip
        try:
            await self._with_body(scope, receive, send, length)
        finally:
            self.bodies.give(lent)

    async def _with_body(self, scope: dict[str, Any], receive: Any, send: Any, length: bytes | None) -> None:
        """The request with its body read (if it has one) and checked, then the app."""
        if length is not None and int(length) > 0:
            try:
                body = await asyncio.wait_for(_read_body(receive), self.body_timeout_s)
            except TimeoutError:
                return await error_response(408, f"the request body did not arrive within {self.body_timeout_s:g} s",
                                            headers={"connection": "close"})(scope, receive, send)  # fmt: skip
            except _ClientGone:
                return None
            try:
                body.decode("utf-8")
            except UnicodeDecodeError as error:
                return await error_response(400, f"the request body is not UTF-8 (byte {error.start}: "
                                                 f"{body[error.start:error.start + 1]!r}); send UTF-8 JSON")(
                    scope, receive, send)  # fmt: skip
            receive = _replay(body, receive)
        if scope["path"] != "/search":
            return await self.app(scope, receive, send)
        state = scope.setdefault("state", {})
        state["arrived"] = True
        self.arrivals.add(1)
        try:
            await self.app(scope, receive, send)
        finally:
            if state.get("arrived"):
                self.arrivals.add(-1)


class _ClientGone(Exception):
    """The client disconnected before its body arrived: there is no one to answer."""


async def _read_body(receive: Any) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Any) -> Any:
    """A `receive` that hands the app the body already read, then waits on the client (disconnects)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict[str, Any]:
        return pending.pop() if pending else await receive()

    return replayed


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """Every refusal and failure of the service has this shape: ``{"error": "<what, and what to do>"}``."""
    return JSONResponse(status_code=status, content={"error": message}, headers=headers)


def _check_model(requested: str | None, release: LoadedRelease) -> None:
    if requested is None:
        return
    if "/" in requested or "\\" in requested or ".." in requested or not _MODEL_NAME.match(requested):
        raise ClientError(400, f"model {requested[:80]!r} is not a model name (paths are not accepted); "
                               f"this service serves {model_display_name(release.model)!r}")  # fmt: skip
    if requested not in {release.model, model_display_name(release.model)}:
        raise ClientError(404, f"model {requested!r} is not served here; index version {release.release} "
                               f"is searched with {model_display_name(release.model)!r}")  # fmt: skip


def _pick_retriever(requested: str | None, default: str, release: LoadedRelease) -> str:
    name = requested or default
    if name not in RETRIEVER_KINDS:
        raise ClientError(400, f"unknown retriever {name[:40]!r}: expected one of {', '.join(RETRIEVER_KINDS)}")
    if name not in release.retrievers:
        raise ClientError(400, f"index version {release.release} has no {name} index "
                               f"(available: {', '.join(release.retrievers) or 'none'})")  # fmt: skip
    return name


def _alpha(requested: float | None, release: LoadedRelease) -> float:
    if requested is not None:
        return requested
    if release.stored_alpha is None:
        raise ClientError(400, f"hybrid needs `alpha`: index version {release.release} has no tuned alpha for this "
                               "model (odqa tune-hybrid publishes one)")  # fmt: skip
    return release.stored_alpha


async def _hits(release: LoadedRelease, retriever: str, questions: list[str], k: int, alpha: float | None
                ) -> list[Ranked]:  # fmt: skip
    """Per question: its (passage_id, score) hits, best first."""
    if retriever in ("dense", "bm25"):
        batcher = release.dense if retriever == "dense" else release.bm25
        return await asyncio.wrap_future(batcher.submit([(q, k) for q in questions]))  # type: ignore[union-attr]
    depth = max(DEFAULT_DEPTH, k)  # TASER's K': candidates taken from each side before fusing
    dense, sparse = await asyncio.gather(asyncio.wrap_future(release.dense.submit([(q, depth) for q in questions])),  # type: ignore[union-attr]
                                         asyncio.wrap_future(release.bm25.submit([(q, depth) for q in questions])))  # type: ignore[union-attr]  # fmt: skip
    fused = fused_hits(Hits.from_ranked(dense), Hits.from_ranked(sparse), alpha, k, depth)  # type: ignore[arg-type]
    return fused.ranked()


def create_app(workspace: str | Path | None = None, *, model: str | None = None, retriever: RetrieverKind = "dense",
               index_type: IndexType | None = None, poll_s: float = 1.0,
               batching: BatchSettings | None = None, body_timeout_s: float = BODY_TIMEOUT_S,
               address: str | None = None, bodies: BodyBudget | None = None) -> FastAPI:  # fmt: skip
    """The service over `workspace`'s published indexes; it starts following the pointer on startup
    and is registered in the workspace (with `address`, where it listens) while it runs. `bodies`:
    how many bytes of large request bodies it holds at once (default `service.body_budget`'s)."""
    if retriever not in RETRIEVER_KINDS:
        raise ValueError(f"retriever must be one of {', '.join(RETRIEVER_KINDS)}, got {retriever!r}")
    if index_type is not None and index_type not in INDEX_TYPES:
        raise ValueError(f"index type must be one of {', '.join(INDEX_TYPES)}, got {index_type!r}")
    ws = Workspace.open_existing(workspace)  # a service reads: a folder odqa did not make is refused
    max_k()  # a malformed $ODQA_MAX_K stops the start, not every request
    arrivals = Arrivals()
    holder = ReleaseHolder(ws, model=model, index_type=index_type, batching=batching, poll_s=poll_s,
                           expected=arrivals, service=this_service(address, retriever, model))  # fmt: skip

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await asyncio.to_thread(holder.start)
        try:
            yield
        finally:
            await asyncio.to_thread(holder.stop)

    # FastAPI's /docs and /redoc load their scripts from a CDN (blank offline): they are off, and
    # /docs is a page of the service's own (static/docs.html) that renders /openapi.json.
    app = FastAPI(title="odqa search", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Open-domain QA passage retrieval over the workspace's published indexes.")  # fmt: skip
    app.state.holder = holder

    app.add_middleware(RequestLimits, arrivals=arrivals, body_timeout_s=body_timeout_s, bodies=bodies)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return error_response(error.status_code, str(error.detail), headers=getattr(error, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception) -> JSONResponse:
        # Starlette re-raises the error after this answer; uvicorn logs it with its traceback.
        return error_response(500, f"internal error ({type(error).__name__}); the service logged it and keeps "
                                   "answering other requests")  # fmt: skip

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = []
        for item in error.errors():
            if item.get("type") == "json_invalid":
                reason = (item.get("ctx") or {}).get("error", "invalid JSON")
                problems.append(f"malformed JSON body at character {item['loc'][-1]}: {reason}")
                continue
            where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
            message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
            problems.append(f"{where}: {message}" if where else message)
        return error_response(422, "; ".join(problems)[:2000] or "invalid request")

    @app.exception_handler(ClientError)
    async def client_error(request: Request, error: ClientError) -> JSONResponse:
        return error_response(error.status, error.message)

    @app.exception_handler(NoReleaseError)
    async def no_release(request: Request, error: NoReleaseError) -> JSONResponse:
        return error_response(503, str(error))

    @app.post("/search", response_model=SearchResponse)
    async def search(body: SearchRequest, request: Request) -> Response:
        """Top-k passages of each question, all from one index version (named in the response)."""
        started = time.perf_counter()
        questions = body.all_questions()
        arrivals.add(-1)
        request.state.arrived = False
        with holder.lease() as release:
            _check_model(body.model, release)
            name = _pick_retriever(body.retriever, retriever, release)
            alpha = _alpha(body.alpha, release) if name == "hybrid" else None
            hits = await _hits(release, name, questions, body.k, alpha)
            results = [{"question": q, "hits": [
                {"rank": rank, "passage_id": pid, "score": score, **dict(zip(("title", "text"), release.passage(pid),
                                                                             strict=True))}
                for rank, (pid, score) in enumerate(row, start=1)]} for q, row in zip(questions, hits, strict=True)]  # fmt: skip
            payload = {"version": release.release, "retriever": name, "k": body.k, "alpha": alpha,
                       "model": model_display_name(release.model), "results": results,
                       "took_ms": round((time.perf_counter() - started) * 1000, 2)}  # fmt: skip
        # Built as plain data and serialised once by orjson: the response model documents the shape
        # (/docs) without validating a second copy of every hit.
        return Response(content=orjson.dumps(payload), media_type="application/json")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Loaded version, in-flight requests, releases being retired, the last load failure, what it
        serves and why, a release withheld for narrowing what serves."""
        return holder.health()

    @app.get("/index")
    async def index() -> dict[str, Any]:
        """The loaded release: model, index type, passages snapshot, built_at, version."""
        with holder.lease() as release:
            return {**release.describe(), "default_retriever": retriever}

    async def search_v1(release: LoadedRelease, name: str, questions: list[str], k: int, alpha: float | None
                        ) -> list[Ranked]:  # fmt: skip
        return await _hits(release, name, questions, k, _alpha(alpha, release) if name == "hybrid" else None)

    app.include_router(rest_v1_router(holder, search_v1, max_query_chars=MAX_QUESTION_CHARS))

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(DOCS_PAGE.read_text(encoding="utf-8"))

    return app
