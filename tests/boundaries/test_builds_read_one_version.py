"""A build reads the passages version it started on, to the end, whatever commits meanwhile.

A real `odqa bm25 index` or `odqa encode` subprocess is paused (SIGSTOP) once it holds the read
lease of its passages (`storage.read_leases`). Meanwhile four imports commit new passages: more
than the snapshots a commit keeps, so without the lease the build's files would be deleted under
it, and a build that read the table afresh would index the new passages under the old version.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from odqa.storage import Workspace
from odqa.storage.read_leases import leases_locked, live_leases

REPO_ROOT = Path(__file__).resolve().parents[2]


def _tsv(path: Path, prefix: str, count: int) -> Path:
    rows = "".join(f"{prefix}{i}\tpassage {i} of {prefix} about topic {i % 7}\t{prefix} title {i}\n" for i in range(count))
    path.write_text("id\ttext\ttitle\n" + rows, encoding="utf-8")
    return path


def _odqa(root: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(REPO_ROOT / ".venv" / "bin" / "odqa"), "--workspace", str(root), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT)  # fmt: skip


@contextmanager
def paused_reader(root: Path, proc: subprocess.Popen, what: str, timeout_s: float = 300.0) -> Iterator[None]:
    """Pause `proc` once it holds a read lease for `what` (and not the lease lock); resume it after."""
    deadline = time.monotonic() + timeout_s
    while True:
        if any(lease["pid"] == proc.pid and lease["what"].startswith(what) for lease in live_leases(root)):
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                with leases_locked(root, timeout_s=0.5):  # paused outside the lock: commits can collect
                    break
            except TimeoutError:
                os.kill(proc.pid, signal.SIGCONT)
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the build never leased its passages:\n{proc.communicate()[0]}")
        time.sleep(0.01)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def _commit_four_imports(cli, root: Path, folder: Path) -> None:
    for round_ in range(4):
        cli("--workspace", str(root), "import", "passages", "--format", "dpr-tsv",
            str(_tsv(folder / f"b{round_}.tsv", f"b{round_}-", 3)))  # fmt: skip


def _finished(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    return out


@pytest.mark.usefixtures("java")
def test_a_bm25_build_indexes_the_version_it_started_on(cli, tmp_path: Path) -> None:
    from odqa.pipelines.retrieval.bm25 import open_bm25_index
    from odqa.storage.index_layout import IndexLayout

    root = tmp_path / "ws"
    cli("--workspace", str(root), "import", "passages", "--format", "dpr-tsv", str(_tsv(tmp_path / "a.tsv", "a", 40)))
    ws = Workspace.resolve(root)
    version = ws.table_version("passages")
    build = _odqa(root, "bm25", "index")
    with paused_reader(root, build, "bm25 build"):
        _commit_four_imports(cli, root, tmp_path)
        assert ws.rows("passages") == 52 and ws.table_version("passages") != version
    assert "documents: 40" in _finished(build)
    assert open_bm25_index(IndexLayout.of(ws).bm25(version), version).documents == 40
    assert not any(lease["pid"] == build.pid for lease in live_leases(root))


def test_an_encode_writes_the_vectors_and_keys_of_the_version_it_started_on(cli, tmp_path: Path) -> None:
    from odqa.pipelines.dense.sharded_encoding import EncodedCorpus
    from odqa.storage.index_layout import IndexLayout
    from odqa.storage.model_registry import resolve_model
    from tests.experiments.tiny_encoder import minilm_dir

    root = tmp_path / "ws"
    cli("--workspace", str(root), "import", "passages", "--format", "dpr-tsv", str(_tsv(tmp_path / "a.tsv", "a", 24)))
    ws = Workspace.resolve(root)
    version, model = ws.table_version("passages"), str(minilm_dir())
    encode = _odqa(root, "encode", "--model", model, "--shard-size", "8", "--batch-size", "8")
    with paused_reader(root, encode, "encode"):
        _commit_four_imports(cli, root, tmp_path)
    assert "passages: 24" in _finished(encode)
    built = IndexLayout.of(ws).dense(resolve_model(ws, model).passage_key, version).embeddings
    assert sorted(EncodedCorpus(built).ids().to_pylist()) == sorted(f"a{i}" for i in range(24))
    assert not any(lease["pid"] == encode.pid for lease in live_leases(root))


@pytest.mark.usefixtures("java")
def test_a_reindex_builds_and_publishes_the_passages_it_ingested(cli, tmp_path: Path) -> None:
    """Imports that commit while a re-index builds wait for the next one: it builds BM25 and the
    dense index of the very passages it ingested, and publishes them (it used to encode the newer
    passages and then refuse to publish, the dense index of its own passages missing)."""
    from odqa.storage.releases import current_release
    from tests.experiments.tiny_encoder import minilm_dir

    root = tmp_path / "ws"
    reindex = _odqa(root, "reindex", "--passages", str(_tsv(tmp_path / "a.tsv", "a", 30)), "--model", str(minilm_dir()))
    with paused_reader(root, reindex, "reindex"):
        ws = Workspace.resolve(root)
        version = ws.table_version("passages")
        _commit_four_imports(cli, root, tmp_path)
        assert ws.rows("passages") == 42
    out = _finished(reindex)
    release = current_release(ws)
    assert release is not None and release.passages_version == version, out
    assert "bm25_documents: 30" in out and "encoded_passages: 30" in out, out


def test_release_show_names_the_readers_that_keep_older_files(cli, tmp_path: Path) -> None:
    """Why an older version's files are still on disk: `odqa release show` names the running
    readers that keep them, and stops once they finish."""
    root = tmp_path / "ws"
    importing = ("--workspace", str(root), "import", "passages", "--format", "dpr-tsv")
    cli(*importing, str(_tsv(tmp_path / "a.tsv", "a", 5)))
    ws = Workspace.resolve(root)
    with ws.reading("passages", what="encode m"):
        assert "readers keeping" not in cli("--workspace", str(root), "release", "show").output  # still current
        cli(*importing, "--replace", str(_tsv(tmp_path / "a.tsv", "new", 5)))
        shown = cli("--workspace", str(root), "release", "show").output
        assert "readers keeping older table files until they finish: 1" in shown, shown
        assert f"pid {os.getpid()} on host " in shown and ": encode m (1 file(s) no longer current)" in shown, shown
    assert "readers keeping" not in cli("--workspace", str(root), "release", "show").output
