"""The service's HTTP connections: uvicorn, with a deadline on request headers.

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) but has no limit on how long a
client may take to send a request's headers: a socket that sends ``POST /search HTTP/1.1`` and
then one header line a minute was held forever (50 such sockets were held for 30 s and never
closed). `HeaderDeadlineProtocol` closes a connection whose next request's headers are not
complete within ``header_timeout_s`` of the connection opening or of its previous response.
The body's deadline is the app's (`service.app.RequestLimits`), where a 408 can still be sent.

Every request passes `service.hosts.HostCheck` first: a `Host` that is not an address the service
listens on (nor a name allowed with ``--allowed-host`` / ``$ODQA_SERVE_ALLOWED_HOSTS``) is
answered 421, so a page that rebinds its name to this machine cannot read search results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .hosts import AllowedHosts, HostCheck, configured_hosts

HEADER_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
ALLOWED_HOSTS_ENV = "ODQA_SERVE_ALLOWED_HOSTS"


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections whose request headers are too slow."""

    header_timeout_s = HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._arm_header_deadline()

    def on_headers_complete(self) -> None:
        self._disarm_header_deadline()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        idle = not self.pipeline  # a pipelined request's headers have already arrived
        super().on_response_complete()
        if idle and not self.transport.is_closing():
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
                   extra_hosts: Iterable[str] = ()) -> uvicorn.Config:  # fmt: skip
    """How the service runs under uvicorn (`odqa serve` and the tests alike): one process, no
    access log, the header deadline above, idle keep-alive connections closed after a few seconds,
    and only its own `Host` names answered (`allowed_hosts`; ``extra_hosts``: ``--allowed-host``)."""
    protocol = type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout_s": header_timeout_s})
    app = HostCheck(app, allowed_hosts(host, extra_hosts), setting=f"--allowed-host or ${ALLOWED_HOSTS_ENV}")
    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
                          http=protocol, timeout_keep_alive=KEEP_ALIVE_S)  # fmt: skip
