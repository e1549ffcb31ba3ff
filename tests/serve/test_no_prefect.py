"""The service imports no Prefect: serving a request must never start a Prefect server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from odqa.storage import Workspace
from tests.serve.harness import REPO, subprocess_env

CHECK = """
import sys
from fastapi.testclient import TestClient
from odqa.service.app import create_app

with TestClient(create_app(sys.argv[1], poll_s=0.2)) as client:  # runs the app's startup (the release watcher)
    reply = client.post("/search", json={"question": "Where was Marie Curie born?"})
    assert reply.status_code == 503, reply.text  # an empty workspace: nothing published yet
    assert client.get("/health").json()["status"] == "no_index"
loaded = sorted(name for name in sys.modules if name == "prefect" or name.startswith("prefect."))
print("prefect modules:", loaded)
sys.exit(1 if loaded else 0)
"""


def test_importing_and_starting_the_service_leaves_prefect_unloaded(tmp_path: Path) -> None:
    ws = Workspace.resolve(tmp_path / "ws").root  # an empty workspace: nothing published yet
    done = subprocess.run([sys.executable, "-c", CHECK, str(ws)], env=subprocess_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "prefect modules: []" in done.stdout
