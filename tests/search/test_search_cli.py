"""`odqa search` answers each question as it comes, with one searcher, and runs no Prefect flow.

A program talks to it through pipes: the first answer must come back while stdin is still open.
The process reports at exit which heavy modules it imported: no Prefect (so no flow run, no
server), and for BM25 no torch or FAISS either.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.serve.harness import REPO, minilm, subprocess_env

PASSAGES = [
    ("1", "Maria Sklodowska, later Marie Curie, was born in Warsaw in 1867.", "Marie Curie"),
    ("2", "Marie Curie discovered polonium and radium with Pierre Curie.", "Marie Curie"),
    ("3", "Warsaw is the capital and largest city of Poland.", "Warsaw"),
    ("4", "Pierre Curie was a French physicist, a pioneer in crystallography.", "Pierre Curie"),
    ("5", "Radium is a chemical element with the symbol Ra.", "Radium"),
]

ODQA = """
import atexit, sys
from odqa.flows.cli import main
heavy = ("prefect", "torch", "faiss")
atexit.register(lambda: print("heavy modules:", sorted({n.split(".")[0] for n in sys.modules} & set(heavy)),
                              file=sys.stderr))
main(sys.argv[1:], prog_name="odqa")
"""
WAIT_S = 300  # generous: a loaded 2-core CI machine starts a JVM or torch slowly


@pytest.fixture(scope="module")
def bm25_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five passages and their BM25 index, built by the stages' own steps (no flow run, no server)."""
    from odqa.flows.stages.bm25 import build_bm25_task
    from odqa.flows.stages.passages import import_passages_task
    from odqa.pipelines.retrieval.java import JavaMissingError, check_java
    from odqa.storage import Workspace
    from odqa.storage.passages import require_passages

    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"BM25 needs a JDK: {error}")
    folder = tmp_path_factory.mktemp("search")
    tsv = folder / "psgs.tsv"
    tsv.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{text}\t{title}\n" for i, text, title in PASSAGES))
    ws = Workspace.resolve(folder / "ws")
    import_passages_task.fn(str(ws.root), "dpr-tsv", str(tsv), "test")
    build_bm25_task.fn(str(ws.root), require_passages(ws), 1)
    return ws.root


def start(workspace: Path, *args: str, stdin: int = subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", ODQA, "-w", str(workspace), "search", *args], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                            env=subprocess_env(), cwd=REPO)  # fmt: skip


def lines_of(stream) -> queue.Queue:
    """The stream's lines as they come (a reader thread), so a test can wait with a deadline."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    return lines


def drained(lines: queue.Queue) -> list[str]:
    """What the reader thread has queued so far."""
    got = []
    while not lines.empty():
        got.append(lines.get())
    return got


def next_answer(lines: queue.Queue) -> tuple[str, list[str]]:
    """The next question's heading and its hit lines (`  1. [score] title (id)`)."""
    question, hits = "", []
    while True:
        line = lines.get(timeout=WAIT_S).rstrip("\n")
        if line.startswith("? "):
            question = line[2:]
        elif question and line.strip().startswith(f"{len(hits) + 1}. ["):
            hits.append(line.strip())
            if len(hits) == 3:
                return question, hits


def test_piped_questions_are_answered_one_by_one_before_stdin_closes(bm25_workspace: Path) -> None:
    process = start(bm25_workspace, "--k", "3")
    try:
        answers = lines_of(process.stdout)
        process.stdin.write("Where was Marie Curie born?\n")
        process.stdin.flush()
        question, hits = next_answer(answers)
        assert question == "Where was Marie Curie born?" and hits[0].endswith("Marie Curie (1)")
        assert process.poll() is None, "the first answer came only after the process ended"
        process.stdin.write("\n   \nWhat did Marie Curie discover?\n")  # blank lines are skipped
        process.stdin.flush()
        question, hits = next_answer(answers)
        assert question == "What did Marie Curie discover?" and hits[0].endswith("Marie Curie (2)")
        assert process.poll() is None
        process.stdin.close()
        assert process.wait(timeout=WAIT_S) == 0
    finally:
        process.kill()
        process.wait()
    stderr = process.stderr.read()
    assert "heavy modules: []" in stderr, stderr  # no Prefect: no flow run, no server; no torch for BM25


def test_on_a_terminal_it_prompts_for_each_question(bm25_workspace: Path) -> None:
    controller, terminal = os.openpty()
    process = start(bm25_workspace, "--k", "3", stdin=terminal)
    os.close(terminal)
    try:
        errors = lines_of(process.stderr)
        answers = lines_of(process.stdout)
        os.write(controller, b"Where was Marie Curie born?\n")
        assert next_answer(answers)[0] == "Where was Marie Curie born?"
        assert process.poll() is None
        os.write(controller, b"\x04")  # Ctrl-D: end of input
        assert process.wait(timeout=WAIT_S) == 0
    finally:
        os.close(controller)
        process.kill()
        process.wait()
    said = "".join(drained(errors))
    assert "type a question" in said and said.count("question> ") >= 2, said


def test_a_dense_search_builds_no_missing_index_it_names_the_command(bm25_workspace: Path) -> None:
    before = sorted(p.relative_to(bm25_workspace) for p in (bm25_workspace / "indexes").rglob("*"))
    refused = start(bm25_workspace, "--model", minilm(), "Where was Marie Curie born?", stdin=subprocess.DEVNULL)
    out, err = refused.communicate(timeout=WAIT_S)
    assert refused.returncode == 1, out + err
    assert "no flat index for model" in err and "odqa index build --model" in err and "--type flat" in err, err
    assert "prefect" not in err.split("heavy modules:")[1], err
    assert sorted(p.relative_to(bm25_workspace) for p in (bm25_workspace / "indexes").rglob("*")) == before
