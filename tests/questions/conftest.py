"""Real local servers for the SPARQL tests: Oxigraph, and an HTTP front that misbehaves.

Oxigraph (PyPI `oxigraph`, its CLI) loads an N-Triples file and serves it read-only on
127.0.0.1 (`flows.plumbing.oxigraph.local_sparql_endpoint`, the same server the demo uses), so
SPARQLWrapper queries it exactly as it would query Wikidata. The "front" server
is a tiny http.server on 127.0.0.1 that answers the first requests with an error (429 with
Retry-After, 503 ...) and then forwards requests to Oxigraph, or never recovers.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from odqa.pipelines.questions.triples import WIKIDATA_ENTITY, Triple

RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
SKOS_ALT = "http://www.w3.org/2004/02/skos/core#altLabel"
WDT = "http://www.wikidata.org/prop/direct/"


def _literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"@en'


def ntriples(triples: Sequence[Triple], extra: Sequence[str] = ()) -> str:
    """Wikidata-shaped N-Triples for the facts: wdt: edges, English labels, English aliases."""
    lines = set(extra)
    for t in triples:
        s, o = f"<{WIKIDATA_ENTITY}{t.subject_id}>", f"<{WIKIDATA_ENTITY}{t.object_id}>"
        lines.add(f"{s} <{WDT}{t.relation}> {o} .")
        lines.add(f"{s} <{RDFS_LABEL}> {_literal(t.subject)} .")
        lines.add(f"{o} <{RDFS_LABEL}> {_literal(t.object)} .")
        for alias in t.object_aliases:
            lines.add(f"{o} <{SKOS_ALT}> {_literal(alias)} .")
    return "\n".join(sorted(lines)) + "\n"


@pytest.fixture
def oxigraph(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Serve an N-Triples text with Oxigraph (flows.plumbing.oxigraph.local_sparql_endpoint); returns its URL."""
    from odqa.flows.plumbing.oxigraph import local_sparql_endpoint

    with contextlib.ExitStack() as stack:

        def serve(data: str) -> str:
            source = tmp_path / f"data-{uuid.uuid4().hex[:8]}.nt"
            source.write_text(data, encoding="utf-8")
            return stack.enter_context(local_sparql_endpoint([source]))

        yield serve


class FrontServer:
    """http.server on 127.0.0.1 that fails requests per a script, then proxies to `upstream`."""

    def __init__(self, failures: Callable[[int], tuple[int, dict[str, str]] | None], upstream: str | None) -> None:
        self.failures = failures
        self.upstream = upstream
        self.requests = 0
        self.user_agents: list[str] = []
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                front.requests += 1
                front.user_agents.append(self.headers.get("User-Agent", ""))
                failure = front.failures(front.requests)
                if failure is not None or front.upstream is None:
                    status, headers = failure or (503, {})
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                query = self.path.split("?", 1)[1] if "?" in self.path else ""
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                request = urllib.request.Request(
                    front.upstream + ("?" + query if query else ""),
                    data=body,
                    method=self.command,
                    headers={k: v for k, v in self.headers.items() if k.lower() in {"accept", "content-type"}},
                )
                with urllib.request.urlopen(request, timeout=30) as response:
                    payload = response.read()
                    self.send_response(response.status)
                    self.send_header("Content-Type", response.headers.get("Content-Type", "application/json"))
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

            do_GET = _handle
            do_POST = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/sparql"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def front_server() -> Iterator[Callable[..., FrontServer]]:
    servers: list[FrontServer] = []

    def start(failures: Callable[[int], tuple[int, dict[str, str]] | None], upstream: str | None = None) -> FrontServer:
        server = FrontServer(failures, upstream)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()
