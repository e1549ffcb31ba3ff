"""A small HTTP server on 127.0.0.1 serving the files of a folder, for downloads tested without the
internet: it honours `Range: bytes=N-` (206, or 416 past the end), and can be told to misbehave the
way real servers and networks do, per path:

- `cut_after[path] = n`: the next transfer of `path` stops after byte n of the file (the
  connection closes with the body short of its Content-Length), once;
- `corrupt[path] = i`: byte i of the file is served flipped, on every transfer;
- `fail_once[path] = status`: the next request for `path` gets that status (503) with no body, once;
- `redirects[path] = other`: `path` answers 302 to `other`;
- `delay_s[path] = s`: every transfer of `path` waits s seconds before its body (a slow link);
- `endless`: paths answered 200 with a chunked body of no announced size that never ends (until
  the client hangs up or the server stops), as a hostile or broken server sends.

Each request is recorded (`requests`: path and headers), so a test can assert what the client
asked for. The server serves `folder/<url path>`: a mirror's layout (`/HOST/PATH`) is a folder
named after the host. Use it as a context manager: `with LoopbackServer(folder) as server:`.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class _Server(ThreadingHTTPServer):
    """A client that hangs up (a download refused at its headers, an endless body stopped) is not
    the server's error: no traceback for it in the test log; any other error keeps its traceback."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclass
class LoopbackServer:
    folder: Path
    cut_after: dict[str, int] = field(default_factory=dict)
    corrupt: dict[str, int] = field(default_factory=dict)
    fail_once: dict[str, int] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    endless: set[str] = field(default_factory=set)
    delay_s: dict[str, float] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __enter__(self) -> LoopbackServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                server._answer(self)

        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def url_of(self, path: str) -> str:
        return f"{self.url}/{path.lstrip('/')}"

    def requests_for(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == "/" + path.lstrip("/")]

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        path = unquote(urlsplit(handler.path).path)
        key = path.lstrip("/")
        self.requests.append({"path": path, "headers": dict(handler.headers.items())})
        if key in self.fail_once:
            self._empty(handler, self.fail_once.pop(key))
            return
        if key in self.endless:
            self._endless(handler)
            return
        if key in self.redirects:
            handler.send_response(302)
            handler.send_header("Location", self.url_of(self.redirects[key]))
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        file = (self.folder / key).resolve()
        if not file.is_file() or self.folder.resolve() not in file.parents:
            self._empty(handler, 404)
            return
        data = bytearray(file.read_bytes())
        if key in self.corrupt:
            data[self.corrupt[key]] ^= 0xFF
        start, status = 0, 200
        match = _RANGE.fullmatch(handler.headers.get("Range", ""))
        if match:
            start = int(match.group(1))
            if start >= len(data):
                self._empty(handler, 416, {"Content-Range": f"bytes */{len(data)}"})
                return
            status = 206
        body = bytes(data[start:])
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("Accept-Ranges", "bytes")
        if status == 206:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.end_headers()
        time.sleep(self.delay_s.get(key, 0.0))
        cut = self.cut_after.pop(key, None)
        if cut is not None and start < cut:
            handler.wfile.write(body[: cut - start])
            handler.wfile.flush()
            handler.close_connection = True
            return
        handler.wfile.write(body)

    def _endless(self, handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        chunk = b"%x\r\n%s\r\n" % (1 << 16, b"x" * (1 << 16))
        handler.close_connection = True
        try:
            while not self._stopping.is_set():
                handler.wfile.write(chunk)
        except OSError:  # the client hung up
            pass

    @staticmethod
    def _empty(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str] | None = None) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
