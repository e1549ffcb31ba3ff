"""The service's HTTP connections: uvicorn, with a deadline and a size on every request head.

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) but bounds neither how long a
client may take to send a request's head nor how large it may be:

* a socket that sent ``POST /search HTTP/1.1`` and then one header line a minute was held forever
  (50 such sockets were held for 30 s and never closed);
* a URL over 64 KiB was cut by the URL parser (its offsets are 16-bit) and answered as another
  request: ``/v1/bm25/doc/1`` followed by 65,536 zeros returned document "1";
* 40 MB of request headers were read and kept (16 such clients added 470 MB to the service).

`BoundedHeadProtocol` closes a connection whose next request head is not complete within
``header_timeout_s`` of the connection opening or of its previous response, and answers **414**
for a request line (URL) over ``max_url_bytes`` and **431** for a head over ``max_header_bytes``
or with more than ``max_headers`` fields. Sizes are checked as the bytes arrive, before the
parser is given more of them than the limit, so an oversized head costs at most the limit in
memory: the answer goes out, the connection is closed for writing, and whatever the client still
sends is read and dropped for at most `LINGER_S` (so that it can read the answer before the close)
instead of being kept. The body's size and deadline are the app's (`service.app.RequestLimits`).
Bytes the parser rejects get **400** in the same ``{"error": ...}`` shape, naming its reason.

Every request passes `service.hosts.HostCheck` first: a `Host` that is not an address the service
listens on (nor a name allowed with ``--allowed-host`` / ``$ODQA_SERVE_ALLOWED_HOSTS``) is
answered 421, so a page that rebinds its name to this machine cannot read search results.
"""

from __future__ import annotations

import asyncio
import http
import sys
from collections.abc import Iterable
from typing import Any

import httptools
import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .hosts import AllowedHosts, HostCheck, configured_hosts

HEADER_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
MAX_URL_BYTES = 8 * 1024  # nginx's and uvicorn-h11's order of size: a GET query well beyond any question
MAX_HEADER_BYTES = 64 * 1024  # the whole head: request line and every header field
MAX_HEADERS = 100  # header fields (Apache's LimitRequestFields)
LINGER_S = 2.0  # how long a refused client's further bytes are dropped before the connection closes
ALLOWED_HOSTS_ENV = "ODQA_SERVE_ALLOWED_HOSTS"


class BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, bounding each request head in time, bytes and fields."""

    header_timeout_s = HEADER_TIMEOUT_S
    max_url_bytes = MAX_URL_BYTES
    max_header_bytes = MAX_HEADER_BYTES
    max_headers = MAX_HEADERS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._in_head = True  # the bytes arriving belong to a request head (until its headers complete)
        self._head_bytes = 0
        self._heads_done = 0
        self._url_bytes = 0
        self._header_count = 0
        self._refusal: tuple[int, str] | None = None
        self._lingering = False
        self._arm_header_deadline()

    # -- bytes in ----------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        """Gives the parser at most what is left of the head's limit while a head arrives."""
        while data and not self._lingering and not self.transport.is_closing():
            if not self._in_head:
                # A body (the app bounds it), or what follows a head in the same read: a pipelined
                # request in it is counted by the callbacks and bounded by the read size.
                super().data_received(data)
                break
            room = self.max_header_bytes - self._head_bytes
            piece, data = data[:room], data[room:]
            heads_done = self._heads_done
            self._head_bytes += len(piece)
            super().data_received(piece)
            if self._refusal is None and data and self._heads_done == heads_done:
                self._refusal = (431, f"the request head is over the {self.max_header_bytes:,}-byte limit "
                                      "(request line and headers); send fewer or shorter headers")  # fmt: skip
            if self._refusal is not None:
                self._refuse(*self._refusal)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._url_bytes = 0
        self._header_count = 0

    def on_url(self, url: bytes) -> None:
        if self._refusal is not None:
            return
        self._url_bytes += len(url)
        if self._url_bytes > self.max_url_bytes:
            self._refusal = (414, f"the URL is over the {self.max_url_bytes:,}-byte limit; send long questions "
                                  "in the body of POST /search")  # fmt: skip
            return
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refusal is not None:
            return
        self._header_count += 1
        if self._header_count > self.max_headers:
            self._refusal = (431, f"the request has more than {self.max_headers} header fields; send fewer")
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refusal is not None:
            return
        self._in_head = False
        self._heads_done += 1
        self._disarm_header_deadline()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._refusal is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refusal is not None:
            return
        self._in_head = True
        self._head_bytes = 0
        super().on_message_complete()

    # -- refusing ------------------------------------------------------------------------------
    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes its parser rejects (a Content-Length beside Transfer-Encoding,
        two Content-Lengths, a bad chunk size, no HTTP at all), in the service's one error shape.

        uvicorn answered them in plain text, ``Invalid HTTP request received.``, so a client that
        reads every refusal as ``{"error": ...}`` got none. uvicorn calls this from its
        ``except httptools.HttpParserError`` block, where the parser's reason is the exception
        being handled: it is named in the answer."""
        error = sys.exc_info()[1]
        reason = str(error) if isinstance(error, httptools.HttpParserError) and str(error) else msg.rstrip(".")
        message = f"malformed HTTP request: {reason} (the service speaks plain HTTP/1.1; a body has one Content-Length)"
        cycle = self.cycle
        if cycle is not None and not self._in_head and not cycle.response_started:
            # A malformed body of a request the app has but has not answered: its answer is
            # dropped (the app reads a disconnect), and the 400 is the one answer.
            cycle.disconnected = True
            cycle.message_event.set()
        elif cycle is not None and (not self._in_head or not cycle.response_complete):
            self.transport.close()  # an answer is (being) written for this connection: no second one
            return
        self._lingering = True
        self._disarm_header_deadline()
        self._write_refusal(400, message)

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` with the service's error shape, stop writing, and drop what still comes."""
        self._lingering = True
        self._disarm_header_deadline()
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # a pipelined head while an answer is being written: no second answer
            return
        self._write_refusal(status, message)

    def _write_refusal(self, status: int, message: str) -> None:
        """Write the error answer, close for writing, and close the connection after `LINGER_S`."""
        body = orjson.dumps({"error": message})
        head = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}".encode()]
        head += [name + b": " + value for name, value in self.server_state.default_headers]
        head += [b"content-type: application/json", b"content-length: " + str(len(body)).encode(),
                 b"connection: close"]  # fmt: skip
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._header_deadline = self.loop.call_later(LINGER_S, self.transport.close)  # disarmed when the client closes

    # -- the head's deadline --------------------------------------------------------------------
    def on_response_complete(self) -> None:
        idle = not self.pipeline  # a pipelined request's headers have already arrived
        super().on_response_complete()
        if idle and not self.transport.is_closing() and not self._lingering:
            self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        self._disarm_header_deadline()
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def allowed_hosts(host: str, extra: Iterable[str] = ()) -> AllowedHosts:
    """The `Host` names a service bound to ``host`` answers: its addresses, ``extra`` and
    ``$ODQA_SERVE_ALLOWED_HOSTS``."""
    return AllowedHosts.for_bind(host, [*extra, *configured_hosts(ALLOWED_HOSTS_ENV)])


def uvicorn_config(app: Any, host: str, port: int, *, header_timeout_s: float = HEADER_TIMEOUT_S,
                   max_url_bytes: int = MAX_URL_BYTES, max_header_bytes: int = MAX_HEADER_BYTES,
                   max_headers: int = MAX_HEADERS, extra_hosts: Iterable[str] = ()) -> uvicorn.Config:  # fmt: skip
    """How the service runs under uvicorn (`odqa serve` and the tests alike): one process, no
    access log, the bounded request heads above, idle keep-alive connections closed after a few
    seconds, and only its own `Host` names answered (`allowed_hosts`; ``extra_hosts``:
    ``--allowed-host``)."""
    for name, value in (("max_url_bytes", max_url_bytes), ("max_header_bytes", max_header_bytes),
                        ("max_headers", max_headers)):  # fmt: skip
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    protocol = type("BoundedHeadProtocol", (BoundedHeadProtocol,), {
        "header_timeout_s": header_timeout_s, "max_url_bytes": max_url_bytes, "max_header_bytes": max_header_bytes,
        "max_headers": max_headers})  # fmt: skip
    app = HostCheck(app, allowed_hosts(host, extra_hosts), setting=f"--allowed-host or ${ALLOWED_HOSTS_ENV}")
    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
                          http=protocol, timeout_keep_alive=KEEP_ALIVE_S)  # fmt: skip
