"""A re-index SIGKILLed between its publish and the record of its figures, then run again: the
release it published is current, and the rerun records that release's figures in `metrics`
(`reindex:<release>`) instead of losing them for good (every later run finds the release current
and publishes nothing)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odqa.storage import Workspace
from odqa.storage.index_layout import IndexLayout
from odqa.storage.releases import current_release, pointer_path, published_releases
from tests.conftest import REPO_ROOT
from tests.ops.input_files import PASSAGES, write_passages

MORE = [("m1", "Quellor river floods every spring near Zorbania's capital.", "Quellor"),
        ("m2", "Morvil harbour ships blue granite from Farnwick.", "Morvil")]  # fmt: skip
NEWER = [("n1", "Farnwick quarries close each winter when the pass is snowed in.", "Farnwick")]
LATEST = [("l1", "Zorbania's capital lies where the Quellor meets the sea.", "Zorbania")]


def _reindex(workspace: Path, passages: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    command = [sys.executable, "-c", "from odqa.flows.cli import main; main()", "--workspace", str(workspace),
               "reindex", "--passages", str(passages)]  # fmt: skip
    with open(log, "ab") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT,
                                start_new_session=True)  # fmt: skip


def _old_build(ws: Workspace, files: int, version: str) -> None:
    """A BM25 build no kept release uses, as a release pruned long ago left it: the publish deletes
    it after switching the pointer, which holds the run between its publish and its record."""
    folder = IndexLayout.of(ws).bm25(version)
    (folder / "segments").mkdir(parents=True)
    for n in range(files):
        (folder / "segments" / f"_{n}.cfs").write_bytes(b"")
    for path in (folder / "segments", folder):
        os.utime(path, (1e9, 1e9))


@pytest.mark.e2e
def test_a_reindex_killed_after_its_publish_gets_its_figures_recorded_by_the_rerun(
    prefect_harness: str, tmp_path: Path, java
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PREFECT_API_URL": prefect_harness}
    root, log = tmp_path / "ws", tmp_path / "reindex.log"
    first = write_passages(tmp_path / "passages.tsv", PASSAGES)
    assert _reindex(root, first, env, log).wait(timeout=600) == 0, log.read_text()
    ws = Workspace.resolve(root)
    served = current_release(ws)
    assert served is not None and len(ws.sql(f"SELECT * FROM metrics WHERE run = 'reindex:{served.release}'")) > 0

    _old_build(ws, files=60_000, version="0" * 16)
    more = write_passages(tmp_path / "more.tsv", MORE)
    pointer = pointer_path(ws).read_bytes()
    job = _reindex(root, more, env, log)
    deadline = time.monotonic() + 600
    while pointer_path(ws).read_bytes() == pointer:
        assert job.poll() is None, f"the re-index ended before it published:\n{log.read_text()}"
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.002)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    published = json.loads(pointer_path(ws).read_text(encoding="utf-8"))["release"]
    recorded = f"SELECT metric, value FROM metrics WHERE run = 'reindex:{published}'"
    assert ws.sql(recorded).num_rows == 0, "the kill should land between the publish and the record"

    assert _reindex(root, more, env, log).wait(timeout=600) == 0, log.read_text()
    assert current_release(ws).release == published  # the rerun had nothing to publish
    figures = {row["metric"]: row["value"] for row in ws.sql(recorded).to_pylist()}
    assert figures, f"the rerun did not record the figures of release {published}"
    assert figures["passages"] == figures["bm25_documents"] == len(PASSAGES) + len(MORE)
    # a further rerun records nothing twice
    assert _reindex(root, more, env, log).wait(timeout=600) == 0, log.read_text()
    assert ws.sql(recorded).num_rows == len(figures)

    # killed again the same way, then run with new passages: its own release and the killed one's
    _old_build(ws, files=60_000, version="1" * 16)
    newer = write_passages(tmp_path / "newer.tsv", NEWER)
    pointer = pointer_path(ws).read_bytes()
    job = _reindex(root, newer, env, log)
    while pointer_path(ws).read_bytes() == pointer:
        assert job.poll() is None, f"the re-index ended before it published:\n{log.read_text()}"
        time.sleep(0.002)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    killed = json.loads(pointer_path(ws).read_text(encoding="utf-8"))["release"]
    assert ws.sql(f"SELECT * FROM metrics WHERE run = 'reindex:{killed}'").num_rows == 0
    latest = write_passages(tmp_path / "latest.tsv", LATEST)
    assert _reindex(root, latest, env, log).wait(timeout=600) == 0, log.read_text()
    assert current_release(ws).release not in (published, killed)
    runs = {row["run"]: row["n"] for row in ws.sql("SELECT run, count(*) AS n FROM metrics WHERE run LIKE "
                                                   "'reindex:%' GROUP BY run").to_pylist()}  # fmt: skip
    assert {f"reindex:{r.release}" for r in published_releases(ws)} <= set(runs), runs
    assert runs[f"reindex:{killed}"] == runs[f"reindex:{current_release(ws).release}"] == len(figures), runs
