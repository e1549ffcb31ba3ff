"""A local SPARQL endpoint for RDF files: Oxigraph (PyPI `oxigraph`) on 127.0.0.1.

The bundled sample's Wikidata-shaped RDF is queried through SPARQLWrapper exactly as Wikidata
would be, so the demo and the tests exercise the real SPARQL path. Kept free of Prefect imports
so tests of the pure steps can use it cheaply.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def local_sparql_endpoint(rdf_files: list[Path], startup_timeout: float = 60.0) -> Iterator[str]:
    """Serve RDF files (N-Triples, Turtle ...) with Oxigraph on 127.0.0.1; yields the query URL.

    The demo and the tests query the bundled Wikidata-shaped sample through SPARQLWrapper exactly
    as they would query Wikidata: `oxigraph load` builds a store in a temporary folder and
    `oxigraph serve-read-only` answers on a free local port until the block ends.
    """
    cli = Path(sys.executable).parent / "oxigraph"
    binary = str(cli) if cli.exists() else shutil.which("oxigraph")
    if binary is None:
        raise FileNotFoundError("the oxigraph CLI is not installed (pip install oxigraph)")
    with tempfile.TemporaryDirectory(prefix="odqa-oxigraph-") as store:
        loaded = subprocess.run([binary, "load", "--location", store, "--file", *map(str, rdf_files)],
                                capture_output=True, text=True)
        if loaded.returncode != 0:
            raise RuntimeError(f"oxigraph could not load {', '.join(map(str, rdf_files))}: {loaded.stderr.strip()}")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen([binary, "serve-read-only", "--location", store, "--bind", f"127.0.0.1:{port}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}/query"
        try:
            deadline = time.monotonic() + startup_timeout
            while True:
                try:
                    urllib.request.urlopen(url + "?query=ASK%7B%7D", timeout=2).read()
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"oxigraph did not start on {url}") from None
                    time.sleep(0.1)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
