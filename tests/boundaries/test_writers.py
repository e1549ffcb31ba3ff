"""One writer per thing: a second ingest, import or training of the same thing is refused naming
the first, which finishes with nothing lost; a dead writer's lock is taken over at once (issue 28).

The first writer runs as a real `odqa` subprocess and is paused (SIGSTOP) once it holds its lock,
so that the second always meets it mid-write, however fast the machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from odqa.storage import Workspace
from odqa.storage.locks import WriterBusy, writer_lock
from tests.conftest import SAMPLE_DIR

REPO_ROOT = Path(__file__).resolve().parents[2]
DUMP = SAMPLE_DIR / "wiki" / "enwiki-sample-pages-articles.xml"


def _odqa(root: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(REPO_ROOT / ".venv" / "bin" / "odqa"), "--workspace", str(root), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT)  # fmt: skip


@contextmanager
def paused_holder(root: Path, proc: subprocess.Popen, timeout_s: float = 300.0) -> Iterator[int]:
    """Wait until `proc` holds a writer lock of the workspace, pause it there, yield its pid; resume it after."""
    deadline = time.monotonic() + timeout_s
    while True:
        for lock in (root / "locks").glob("*.lock"):
            text = lock.read_text(encoding="utf-8") if lock.exists() else ""
            if text and json.loads(text)["pid"] == proc.pid:
                os.kill(proc.pid, signal.SIGSTOP)
                try:
                    yield proc.pid
                finally:
                    os.kill(proc.pid, signal.SIGCONT)
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the first writer never held a lock:\n{proc.communicate()[0]}")
        time.sleep(0.01)


def _finished(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    return out


def test_second_ingest_is_refused_and_keeps_the_first_ones_staging(cli, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    other = tmp_path / "other-dump.xml"
    other.write_bytes(DUMP.read_bytes().replace(b"</mediawiki>", b"<!-- another dump --></mediawiki>"))
    first = _odqa(root, "ingest", "wikipedia", str(DUMP), "--workers", "1")
    with paused_holder(root, first) as pid:
        staging = sorted((root / "staging").glob("ingest-wikipedia-*"))
        second = cli("--workspace", str(root), "ingest", "wikipedia", str(other), ok=False)
        assert second.exit_code != 0
        assert f"pid {pid} on host" in second.output and "ingest-wikipedia" in second.output, second.output
        assert sorted((root / "staging").glob("ingest-wikipedia-*")) == staging  # nothing of the first removed
    _finished(first)
    ws = Workspace.resolve(root)
    assert ws.stage_record("ingest-wikipedia").report["dump"] == str(DUMP.resolve())
    rows = ws.rows("passages")
    assert rows > 0 and ws.sql("SELECT count(DISTINCT passage_id) AS n FROM passages").column("n")[0].as_py() == rows


def _corpus(path: Path, prefix: str, rows: int) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("id\ttext\ttitle\n")
        for i in range(rows):
            handle.write(f"{prefix}{i}\tpassage {i} of {prefix} with a few more words\tTitle {i // 10}\n")
    return path


def test_second_import_is_refused_and_runs_after(cli, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    a, b = _corpus(tmp_path / "a.tsv", "a", 20_000), _corpus(tmp_path / "b.tsv", "b", 10)
    first = _odqa(root, "import", "passages", "--format", "dpr-tsv", str(a))
    with paused_holder(root, first) as pid:
        second = cli("--workspace", str(root), "import", "passages", "--format", "dpr-tsv", str(b), ok=False)
        assert second.exit_code != 0
        assert f"pid {pid} on host" in second.output and "passages table" in second.output, second.output
    assert "passages: 20000" in _finished(first)
    out = cli("--workspace", str(root), "import", "passages", "--format", "dpr-tsv", str(b)).output
    assert "passages: 10" in out and "total: 20010" in out
    assert Workspace.resolve(root).rows("passages") == 20_010


def _holder(root: Path, seconds: float) -> subprocess.Popen:
    """A process that holds the writer lock of "model:m" for `seconds`."""
    proc = subprocess.Popen(
        [str(REPO_ROOT / ".venv" / "bin" / "python"), "-c",
         "import sys, time; from pathlib import Path; from odqa.storage.locks import writer_lock\n"
         "with writer_lock(Path(sys.argv[1]), 'model:m', 'the model m'):\n"
         "    print('held', flush=True); time.sleep(float(sys.argv[2]))", str(root), str(seconds)],
        stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_lock_names_its_holder_waits_and_reclaims_a_dead_ones(tmp_path: Path) -> None:
    holder = _holder(tmp_path, 1.5)
    busy = rf"the model m is being written by pid {holder.pid} on host \S+ \(python "
    with pytest.raises(WriterBusy, match=busy), writer_lock(tmp_path, "model:m", "the model m"):
        pass
    started = time.monotonic()
    with writer_lock(tmp_path, "model:m", "the model m", wait_s=60):  # waits for the holder to finish
        assert holder.wait(timeout=5) == 0 and time.monotonic() - started > 0.3
    killed = _holder(tmp_path, 600)
    killed.kill()
    killed.wait()
    with writer_lock(tmp_path, "model:m", "the model m"):  # taken over at once, no waiting
        pass


def test_second_training_of_a_model_id_is_refused(cli, tiny_checkpoint: str, tmp_path: Path) -> None:
    from tests.models.filled_workspace import fill_workspace

    root = tmp_path / "ws"
    fill_workspace(root)
    args = ["train", "--arch", "dpr", "--base", tiny_checkpoint, "--train", "toy:train", "--model-id", "same",
            "--max-steps", "2", "--batch-size", "3"]  # fmt: skip
    first = _odqa(root, *args)
    with paused_holder(root, first) as pid:
        second = cli("--workspace", str(root), *args, "--lr", "1e-3", ok=False)
        assert second.exit_code != 0
        assert f"the model 'same' is being written by pid {pid} on host" in second.output, second.output
        assert "job.json" not in second.output
    assert "train same: done" in _finished(first)
    models = Workspace.resolve(root).sql("SELECT model_id FROM models").column("model_id").to_pylist()
    assert models == ["same"]


def test_dead_bm25_builds_are_reclaimed(tmp_path: Path) -> None:
    from odqa.pipelines.retrieval.bm25 import reclaim_dead_builds

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / f".bm25-v1.building-{gone.pid}"
    live = tmp_path / f".bm25-v2.building-{os.getpid()}"
    for folder in (dead, live):
        (folder / "collection").mkdir(parents=True)
    assert reclaim_dead_builds(tmp_path / "bm25-v3") == [dead]
    assert live.exists() and not dead.exists()
