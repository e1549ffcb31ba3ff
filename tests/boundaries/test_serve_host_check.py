"""Issue 41: `odqa serve` answers only its own `Host` names, so a page that rebinds its name to
127.0.0.1 cannot read search results; names the operator adds (`--allowed-host`,
$ODQA_SERVE_ALLOWED_HOSTS) are answered too. Its log is owner-only (`flows.backend.file_modes`)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import requests

from odqa.service.app import create_app
from odqa.storage import Workspace
from tests.serve.harness import REPO, ServiceThread, free_port, subprocess_env

FOREIGN = "rebound.example"


def test_the_service_refuses_a_foreign_host_and_answers_its_own(tmp_path: Path) -> None:
    with ServiceThread(create_app(Workspace.resolve(tmp_path / "ws").root, poll_s=0.2)) as service:
        port = service.url.rsplit(":", 1)[1]
        refused = requests.get(f"{service.url}/health", headers={"Host": f"{FOREIGN}:{port}"}, timeout=10)
        assert refused.status_code == 421 and "--allowed-host" in refused.json()["error"], refused.text
        search = requests.post(f"{service.url}/search", json={"question": "x"}, headers={"Host": FOREIGN}, timeout=10)
        assert search.status_code == 421, search.text
        for own in (f"127.0.0.1:{port}", f"localhost:{port}"):
            assert requests.get(f"{service.url}/health", headers={"Host": own}, timeout=10).status_code == 200


def test_odqa_serve_answers_the_names_it_is_given_and_logs_owner_only(tmp_path: Path) -> None:
    ws, port = Workspace.resolve(tmp_path / "ws").root, free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-c", "from odqa.flows.cli import main; main()", "--workspace", str(ws), "serve",
               "--host", "127.0.0.1", "--port", str(port), "--allowed-host", "search.example.org"]  # fmt: skip
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        process = subprocess.Popen(command, env=subprocess_env(ODQA_SERVE_ALLOWED_HOSTS="other.example, third.example"),
                                   stdout=sink, stderr=subprocess.STDOUT, cwd=REPO)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.3)
        for name in ("search.example.org", "other.example", "third.example"):
            assert requests.get(f"{url}/health", headers={"Host": name}, timeout=10).status_code == 200, name
        assert requests.get(f"{url}/health", headers={"Host": FOREIGN}, timeout=10).status_code == 421
        assert (ws / "logs" / "odqa.log").stat().st_mode & 0o777 == 0o600
    finally:
        process.terminate()
        process.wait(timeout=30)
