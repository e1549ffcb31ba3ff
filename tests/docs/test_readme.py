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

An output block (a plain ``` block right after a marked one) shows what that block printed: each
of its lines must be a line of the run's transcript of that block, in order, once what varies from
run to run is masked on both sides (`masked`: dates, times, rates, decimals and a lone 0 or 1, ports,
pids, release ids, content hashes, the checkout's and the workspace's paths; runs of spaces). A line ``...`` (or one
starting with it) stands for lines left out. So an output block cannot go stale: a renamed field,
a `None` the CLI no longer prints or a line it now prints differently fails here.
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

from odqa.flows.backend.local_server import reset_server

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
MARKED = re.compile(r'<!-- test(?:: background until "(?P<until>[^"]+)")? -->\n```bash\n(?P<code>.*?)```'
                    r"(?:\n\n```\n(?P<output>.*?)```)?", re.S)  # fmt: skip
WORKSPACE_LINE = "$PWD/my-workspace"
SERVE_PORT = 8000
SHOWN_CHECKOUT = "/home/me/odqa"  # where the README's output blocks show the checkout and its workspace
SHOWN_WORKSPACE = f"{SHOWN_CHECKOUT}/my-workspace"
VARYING = [  # what differs from run to run, masked in the transcript and in the README alike
    (re.compile(r"\d{8}T\d{6,}Z-[0-9a-f]+"), "<release>"),
    (re.compile(r"\b[0-9a-f]{16,64}\b"), "<hash>"),
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\+\d\d:\d\d)?"), "<timestamp>"),  # when a release was published
    (re.compile(r"python3\.\d+"), "python3.X"),
    (re.compile(r"(127\.0\.0\.1|localhost):\d+"), r"\1:<port>"),
    (re.compile(r"\bpid \d+"), "pid <n>"),
    (re.compile(r"[\d,.]+(e[-+]\d+)? (\w+)/s\b"), r"<n> \2/s"),
    (re.compile(r"\b\d+:\d\d(:\d\d)?\b"), "<time>"),
    (re.compile(r"(?<==)-?\d+(\.\d+)?(e[-+]\d+)?\b"), "<x>"),  # a progress figure (examples_per_s=0.3, or =6 when faster)
    (re.compile(r"-?\d[\d,]*\.\d+(e[-+]\d+)?|\d+e[-+]\d+"), "<x>"),
    (re.compile(r"(?<![\w.@:-])[01](?![\w.:-])"), "<x>"),  # a figure at its bound (R@5 1) may be 0.98 elsewhere
    (re.compile(r" +"), " "),
]


def marked_blocks(text: str) -> list[tuple[str, str | None]]:
    """(code, background-until text or None) of each marked block, in order."""
    return [(match["code"], match["until"]) for match in MARKED.finditer(text)]


def output_blocks(text: str) -> dict[int, str]:
    """Block number (1-based, as the transcript names them) -> the output block shown after it."""
    return {number: match["output"] for number, match in enumerate(MARKED.finditer(text), 1) if match["output"]}


def masked(line: str, checkout: Path | None = None, workspace: Path | None = None) -> str:
    """`line` with what varies from run to run masked (see the module docstring); a transcript's
    paths first become the ones the README shows."""
    if workspace is not None:
        line = line.replace(str(workspace), SHOWN_WORKSPACE)
    if checkout is not None:
        line = line.replace(str(checkout), SHOWN_CHECKOUT)
    for pattern, mask in VARYING:
        line = pattern.sub(mask, line)
    return line.strip()


def transcript_blocks(transcript: str) -> dict[int, list[str]]:
    """Block number -> the lines the script printed while running it."""
    blocks: dict[int, list[str]] = {}
    number = 0
    for line in transcript.splitlines():
        if line.startswith("=== README block "):
            number = int(line.removeprefix("=== README block "))
            blocks[number] = []
        elif number:
            blocks[number].append(line)
    return blocks


def stale_lines(shown: str, printed: list[str], checkout: Path, workspace: Path) -> list[str]:
    """The lines of an output block that are not, in order, lines the block printed."""
    wanted = [masked(line) for line in shown.splitlines() if line.strip() and not line.strip().startswith("...")]
    printed_masked = [masked(line, checkout, workspace) for line in printed]
    stale, position = [], 0
    for line in wanted:
        try:
            position = printed_masked.index(line, position) + 1
        except ValueError:
            stale.append(line)
    return stale


def script(blocks: list[tuple[str, str | None]], workspace: Path, logs: Path) -> str:
    """One bash script running ``blocks`` in order (see the module docstring)."""
    lines = ["set -euo pipefail", "BACKGROUND=()",
             'trap \'for pid in "${BACKGROUND[@]}"; do kill "$pid" 2>/dev/null || true; done\' EXIT']  # fmt: skip
    for number, (code, until) in enumerate(blocks, 1):
        code = code.replace(WORKSPACE_LINE, shlex.quote(str(workspace)))
        # on a line of its own even after output without a final newline (curl's JSON)
        lines.append(f"echo; echo '=== README block {number}'")
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


def test_the_readme_tunes_the_hybrid_on_held_out_training_questions_and_shows_no_stale_output() -> None:
    """alpha is tuned on the held-out part of the training split (`odqa questions holdout`), which
    the model does not train on and the hybrid is not reported on; and no output block shows what
    the CLI never prints (`None`, a Python dict)."""
    text = README.read_text(encoding="utf-8")
    commands = "\n".join(code for code, _ in marked_blocks(text)).replace("\\\n", " ")
    held = re.search(r"odqa questions holdout --dataset (\S+) --split (\S+)", commands)
    assert held, "the README holds no training questions out"
    tuned_on = re.search(r"odqa tune-hybrid .*--dev (\S+)", commands)[1]
    assert tuned_on == f"{held[1]}:{held[2]}-tune", tuned_on
    trained_on = re.findall(r"odqa train .*--train (\S+)", commands)
    reported = re.findall(r"odqa retrieve --retriever hybrid .*--dataset (\S+) --split (\S+)", commands)
    assert trained_on == [f"{held[1]}:{held[2]}-fit"] and f"{held[1]}:{held[2]}-tune" not in {f"{d}:{s}" for d, s in reported}
    shown = output_blocks(text)
    assert shown and not [n for n, block in shown.items() if "None" in block or "{'" in block], shown


def test_output_blocks_are_compared_with_what_varies_masked(tmp_path: Path) -> None:
    checkout, workspace = tmp_path / "checkout", tmp_path / "ws"
    printed = ["train dpr: 10/10 step (100.0%) | 0.901 step/s | elapsed 0:11 | done | loss=0.3 lr=2.22e-06",
               f"            path: {workspace}/models/my-retriever", "  batches: 3",
               f"published index release 20261201T101010123Z-0a1b2c3d (bm25) from {checkout}/x"]  # fmt: skip
    shown = ("train dpr: 10/10 step (100.0%) | 0.816 step/s | elapsed 0:12 | done | loss=0.3482 lr=1.1e-06\n"
             "...\n        path: /home/me/odqa/my-workspace/models/my-retriever\n"
             "published index release 20261125T170856618719Z-5c5769e2 (bm25) from /home/me/odqa/x\n")
    assert stale_lines(shown, printed, checkout, workspace) == []
    assert stale_lines("  batches: None\n", printed, checkout, workspace) == ["batches: None"]
    assert stale_lines(shown.replace("path:", "folder:"), printed, checkout, workspace)  # a renamed field is stale


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
        printed = transcript_blocks(output)
        stale = {number: lines for number, shown in output_blocks(README.read_text(encoding="utf-8")).items()
                 if (lines := stale_lines(shown, printed[number], REPO_ROOT, workspace))}  # fmt: skip
        assert not stale, f"README output blocks that the run ({transcript}) no longer prints: {stale}"
    finally:
        reset_server(workspace)
