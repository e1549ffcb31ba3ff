"""`odqa ingest wikipedia` end to end: sample ingest, no-op re-run, kill + resume, bad input."""

from __future__ import annotations

import bz2
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from odqa.storage import Workspace
from tests.conftest import REPO_ROOT, SAMPLE_DIR

SAMPLE_DUMP = SAMPLE_DIR / "wiki" / "enwiki-sample-pages-articles.xml.bz2"
MARKUP = ("{{", "}}", "[[", "]]", "<ref", "thumb|", "Category:", "&nbsp;")


def _sorted_rows(ws: Workspace, table: str, keys: list[str]) -> list[dict]:
    return ws.read_table(table).sort_by([(k, "ascending") for k in keys]).to_pylist()


@pytest.mark.e2e
def test_ingest_sample_through_cli_then_noop(cli, tmp_path: Path) -> None:
    ws_dir = tmp_path / "ws"
    first = cli("--workspace", str(ws_dir), "ingest", "wikipedia", str(SAMPLE_DUMP))
    assert "ingest wikipedia: done" in first.output
    ws = Workspace.resolve(ws_dir)
    assert ws.rows("articles") == 182 and ws.rows("passages") > 100 and ws.rows("category_links") > 200
    texts = ws.read_table("passages", columns=["text"]).column("text").to_pylist()
    assert not [t for t in texts if any(m in t for m in MARKUP)]
    assert max(len(t.split()) for t in texts) <= 100
    redirects = ws.sql("SELECT title, redirect_target FROM articles WHERE title = 'NYC'").to_pylist()
    assert redirects == [{"title": "NYC", "redirect_target": "New York City"}]
    assert ws.sql("SELECT count(*) AS n FROM passages WHERE title = 'NYC'").column("n").to_pylist() == [0]
    version = ws.snapshot().version
    again = cli("--workspace", str(ws_dir), "ingest", "wikipedia", str(SAMPLE_DUMP))
    assert "no-op" in again.output and ws.snapshot().version == version


@pytest.mark.e2e
def test_other_options_replace_previous_rows(cli, tmp_path: Path) -> None:
    ws_dir = tmp_path / "ws"
    cli("--workspace", str(ws_dir), "ingest", "wikipedia", str(SAMPLE_DUMP))
    ws = Workspace.resolve(ws_dir)
    hundred = ws.rows("passages")
    cli("--workspace", str(ws_dir), "ingest", "wikipedia", "--words", "50", str(SAMPLE_DUMP))
    assert ws.rows("passages") > hundred and ws.rows("articles") == 182  # replaced, not appended


def test_truncated_dump_fails_clearly_and_keeps_earlier_output(tmp_path: Path) -> None:
    from odqa.flows.stages.wikipedia import dump_fingerprint, ingest_dump
    from odqa.pipelines.wikipedia.dump_reader import DumpError
    from odqa.pipelines.wikipedia.ingest import IngestOptions

    ws = Workspace.resolve(tmp_path / "ws")
    options = IngestOptions(workers=1)
    ingest_dump(ws, SAMPLE_DUMP, options, dump_fingerprint(SAMPLE_DUMP, options))
    before = (ws.snapshot().version, ws.rows("passages"))
    truncated = tmp_path / "truncated.xml.bz2"
    data = SAMPLE_DUMP.read_bytes()
    truncated.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(DumpError, match="truncated.xml.bz2"):
        ingest_dump(ws, truncated, options, dump_fingerprint(truncated, options))
    assert (ws.snapshot().version, ws.rows("passages")) == before


def test_killed_ingest_resumes_to_identical_rows(tmp_path: Path) -> None:
    """SIGKILL an ingest once some chunks are staged; the re-run equals an uninterrupted run."""
    xml = tmp_path / "big.xml"
    grow = [sys.executable, REPO_ROOT / "benchmarks" / "synthetic_dump.py", SAMPLE_DUMP, xml]
    grown = subprocess.run([*grow, "--target-bytes", "3000000"], capture_output=True, text=True)
    assert grown.returncode == 0, grown.stderr
    dump = tmp_path / "big.xml.bz2"
    dump.write_bytes(bz2.compress(xml.read_bytes(), 1))
    killed_ws, clean_ws = tmp_path / "killed", tmp_path / "clean"
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from odqa.flows.stages.wikipedia import dump_fingerprint, ingest_dump
        from odqa.pipelines.wikipedia.ingest import IngestOptions
        from odqa.storage import Workspace
        ws, dump = Workspace.resolve(sys.argv[1]), Path(sys.argv[2])
        options = IngestOptions(chunk_pages=40, workers=2)
        print(ingest_dump(ws, dump, options, dump_fingerprint(dump, options)).resumed_chunks)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", script, str(killed_ws), str(dump)], env=env, cwd=REPO_ROOT)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list((killed_ws / "staging").glob("*/_done/*.json"))) >= 3:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the ingest finished before it could be killed"
    assert Workspace.resolve(killed_ws).rows("passages") == 0  # nothing half-visible
    resumed = subprocess.run(
        [sys.executable, "-c", script, str(killed_ws), str(dump)], env=env, cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    assert int(resumed.stdout.strip().splitlines()[-1]) >= 3
    clean = subprocess.run(
        [sys.executable, "-c", script, str(clean_ws), str(dump)], env=env, cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert clean.returncode == 0, clean.stderr
    a, b = Workspace.resolve(killed_ws), Workspace.resolve(clean_ws)
    for table, keys in {
        "articles": ["article_id"],
        "passages": ["passage_id"],
        "category_links": ["page_id", "category"],
    }.items():
        assert _sorted_rows(a, table, keys) == _sorted_rows(b, table, keys), table
    assert a.read_table("passages").column("passage_id").to_pylist() == b.read_table("passages").column(
        "passage_id"
    ).to_pylist()
