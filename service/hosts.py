"""Which `Host` an HTTP server of odqa answers: its own addresses, and names the user adds.

A page on another site can rebind its own name to 127.0.0.1 (DNS rebinding): the browser then
treats this machine's server as that site, same origin, so CORS and CSRF tokens no longer stand
in the way; the page can read the answers and fetch a token to write with. What the browser
cannot change is the `Host` it sends: the page's own name. So a server that answers only the
names it listens on is out of such a page's reach (docs/security.md). Both the Prefect server
odqa starts (`flows.backend.guarded_prefect`) and `odqa serve` (`service.connections`) put
`HostCheck` in front of their app.

Names, not ports, are compared: a rebinding page cannot send a loopback name or an IP address
(it has only its own name), and an SSH tunnel forwards to another local port.

Plain ASGI and the standard library only: the Prefect server imports it at its start.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})  # noqa: S104 (names of the wildcard bind)
ANY_HOST = "*"
STATUS = 421  # Misdirected Request: this server does not answer for that name


def host_name(value: str) -> str:
    """The name of a `Host` value without its port, lower-cased (``[::1]:4200`` -> ``[::1]``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    name, colon, port = value.rpartition(":")
    return name if colon and port.isdigit() else value


def _is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def configured_hosts(env_var: str) -> list[str]:
    """Names the user allows in ``env_var`` (comma- or space-separated; ``*``: any host)."""
    return [item for item in os.environ.get(env_var, "").replace(",", " ").split() if item]


@dataclass(frozen=True)
class AllowedHosts:
    """The names a server answers; ``any_ip``: also every IP address (a wildcard bind, reached by
    whichever address of the machine); ``anything``: no check (``*``, a deliberate choice)."""

    names: frozenset[str]
    any_ip: bool = False
    anything: bool = False

    @classmethod
    def for_bind(cls, bind: str, extra: Iterable[str] = ()) -> AllowedHosts:
        """What a server listening on ``bind`` answers: the loopback names, the bound address, on
        a wildcard bind every IP address and this machine's names, and ``extra``."""
        extra = [item.strip() for item in extra if item.strip()]
        names = set(LOOPBACK_NAMES) | {host_name(item) for item in extra if item != ANY_HOST}
        wildcard = bind.strip().lower() in WILDCARD_BINDS
        if wildcard:
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        else:
            bound = bind.strip().lower()
            names.add(f"[{bound.strip('[]')}]" if ":" in bound else bound)
        return cls(frozenset(names), any_ip=wildcard, anything=ANY_HOST in extra)

    def allows(self, host: str | None) -> bool:
        if self.anything:
            return True
        if not host:
            return False
        name = host_name(host)
        return name in self.names or (self.any_ip and _is_ip_literal(name))

    def describe(self) -> str:
        listed = ", ".join(sorted(self.names))
        return "any host" if self.anything else listed + (", any IP address" if self.any_ip else "")


class HostCheck:
    """ASGI middleware: a request (or WebSocket) whose `Host` is not allowed gets 421 with a JSON
    body ``{error_key: why}``; everything else, lifespan included, passes untouched."""

    def __init__(self, app: Any, allowed: AllowedHosts, setting: str, error_key: str = "error") -> None:
        self.app = app
        self.allowed = allowed
        self.setting = setting  # where the user adds a name, named in the refusal
        self.error_key = error_key

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        host = next((value.decode("latin-1") for key, value in scope["headers"] if key == b"host"), None)
        if self.allowed.allows(host):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":  # closing before accepting: the server answers 403
            return await send({"type": "websocket.close", "code": 1008})
        body = json.dumps({self.error_key: self.refusal(host)}).encode()
        await send({"type": "http.response.start", "status": STATUS,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})
        return None

    def refusal(self, host: str | None) -> str:
        shown = repr(host[:100]) if host is not None else "no Host header"
        return (f"Host {shown} is not an address of this server (it answers {self.allowed.describe()}): a page of "
                f"another site may have pointed its name at this machine. To reach it under another name, add the "
                f"name to {self.setting}")  # fmt: skip
