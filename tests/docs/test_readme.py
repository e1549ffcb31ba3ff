"""The README's commands work when copied: every ```bash block preceded by a `<!-- test -->`
marker runs, in order, in one bash session and one fresh workspace, as a user would paste them
(on the bundled `sample/own-data`, with the bundled MiniLM, offline). A wrong flag, port or path
fails here. The deployments table of docs/operations.md names every deployment of prefect.yaml.

Markers:

- ``<!-- test -->``: the block runs as is (``set -euo pipefail``: any failing command fails it);
- ``<!-- test: background until "TEXT" -->``: the block (one command that stays in the
  foreground, like `./run server`) runs in the background until its output shows TEXT; the next
  blocks run beside it, and it is stopped with SIGTERM at the end if it still runs.

The only change made to a block is the workspace's place: ``$PWD/my-workspace`` becomes a
temporary folder, so runs never touch the checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from flows.backend.local_server import reset_server

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
MARKED = re.compile(r'<!-- test(?:: background until "(?P<until>[^"]+)")? -->\n```bash\n(?P<code>.*?)```', re.S)
WORKSPACE_LINE = "$PWD/my-workspace"
SERVE_PORT = 8000


def marked_blocks(text: str) -> list[tuple[str, str | None]]:
    """(code, background-until text or None) of each marked block, in order."""
    return [(match["code"], match["until"]) for match in MARKED.finditer(text)]


def script(blocks: list[tuple[str, str | None]], workspace: Path, logs: Path) -> str:
    """One bash script running ``blocks`` in order (see the module docstring)."""
    lines = ["set -euo pipefail", "BACKGROUND=()",
             'trap \'for pid in "${BACKGROUND[@]}"; do kill "$pid" 2>/dev/null || true; done\' EXIT']  # fmt: skip
    for number, (code, until) in enumerate(blocks, 1):
        code = code.replace(WORKSPACE_LINE, shlex.quote(str(workspace)))
        lines.append(f"echo '=== README block {number}'")
        if until is None:
            lines.append(code)
            continue
        command = code.strip()
        assert "\n" not in command, f"a background block must be one command: {command!r}"
        log = logs / f"background-{number}.log"
        lines += [f"{command} > {shlex.quote(str(log))} 2>&1 &", 'BACKGROUND+=("$!")',
                  f"timeout 900 bash -c 'until grep -qF \"$1\" \"$2\"; do kill -0 $3 || exit 1; sleep 1; done' _ "
                  f"{shlex.quote(until)} {shlex.quote(str(log))} $! || {{ cat {shlex.quote(str(log))} >&2; exit 1; }}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def port_in_use(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_the_readme_marks_its_user_path_blocks() -> None:
    blocks = marked_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 8
    commands = "\n".join(code for code, _ in blocks)
    for step in ("odqa import passages", "odqa bm25 index", "odqa train", "odqa index build", "odqa evaluate",
                 "odqa tune-hybrid", "odqa serve", "curl", "./run server"):  # fmt: skip
        assert step in commands, f"the README's tested blocks do not show {step!r}"
    assert "localhost:8000" in commands and "content-type: application/json" in commands


def test_every_deployment_of_prefect_yaml_is_in_the_operations_table() -> None:
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    table = (REPO_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `[^`/]+/([^`]+)` \|", table, re.M))
    missing = [d["name"] for d in config["deployments"] if d["name"] not in rows]
    assert not missing, f"docs/operations.md's deployments table lacks {missing}"


@pytest.mark.timeout(1800)  # a dozen verbs, two short trainings and `./run server`'s deploy
def test_the_readme_commands_run_on_the_bundled_data(tmp_path: Path) -> None:
    if port_in_use(SERVE_PORT):
        pytest.skip(f"port {SERVE_PORT} is in use here; the README's serve block needs it")
    workspace, logs = tmp_path / "my-workspace", tmp_path / "logs"
    logs.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "ODQA_", "VIRTUAL_ENV"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), PREFECT_PROFILES_PATH=str(tmp_path / "none.toml"),
               ODQA_PREFECT_PORT="0")  # any free port: 4200 may be another checkout's server  # fmt: skip
    for name in ("ODQA_POSTGRES_DIR", "ODQA_POSTGRES_BIN", "ODQA_POSTGRES_USER", "ODQA_PREFECT_BACKEND"):
        if name in os.environ:
            env[name] = os.environ[name]
    code = script(marked_blocks(README.read_text(encoding="utf-8")), workspace, logs)
    try:
        transcript = tmp_path / "transcript.txt"  # what each block printed, as it runs
        with transcript.open("w", encoding="utf-8") as sink:
            done = subprocess.run(["bash", "-c", code], cwd=REPO_ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                  timeout=1800)  # fmt: skip
        output = transcript.read_text(encoding="utf-8")
        assert done.returncode == 0, output[-8000:]
        assert '"passage_id"' in output and "R@5" in output
    finally:
        reset_server(workspace)
