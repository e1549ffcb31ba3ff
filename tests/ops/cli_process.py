"""`odqa` in a subprocess the way a user's terminal runs it: no Prefect server configured (the
CLI uses the workspace's own), any free port, the session's PostgreSQL settings kept. Shared by
the server lifecycle, long-lived server and auth tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def cli_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a terminal with no Prefect settings; any free port, not 4200 (a server
    there would take calls of other checkouts that look for `./run server` at its default address)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "ODQA_"))}
    env.update(PYTHONPATH=str(REPO_ROOT), PREFECT_HOME=str(tmp_path / "prefect-home"),
               PREFECT_PROFILES_PATH=str(tmp_path / "no-profiles.toml"), HF_HUB_OFFLINE="1",
               ODQA_PREFECT_STARTUP_TIMEOUT="300", ODQA_PREFECT_PORT="0")  # fmt: skip
    for name in ("ODQA_POSTGRES_DIR", "ODQA_POSTGRES_BIN", "ODQA_POSTGRES_USER", "ODQA_PREFECT_BACKEND"):
        if name in os.environ:  # the backend the rest of the session uses
            env[name] = os.environ[name]
    return env


def odqa(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from odqa.flows.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=600)  # fmt: skip
