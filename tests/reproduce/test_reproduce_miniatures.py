"""`odqa reproduce` end to end on miniatures of the papers' releases (tests/reproduce/miniature.py),
served by a loopback HTTP server through `--mirror` (and `--registry` for the real files' sizes and
digests): fetch (a corrupted byte refused with nothing published, then a cut transfer resumed with
a Range request), import, BM25, a few training steps, index, evaluation and the side-by-side
table, for every setup.

Every setup runs in every `./run test`: one through the command line, the others through the
flow (marked `every_setup`: `./run test -m every_setup` runs them alone), on the tiny encoder with
`max_steps` 1 and a dozen questions: a smoke-sized run (one round, no hybrids, only the
architectures the figures name). The DPR-based setups share one workspace, as a user reproducing
them one after the other would: the passages, their BM25 index and the NQ questions' BM25
negatives are made by the first and recognised by the others (each setup still passes alone)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from odqa.storage import Workspace
from odqa.storage.downloads import download_slot
from odqa.storage.setups import load_setup
from tests.experiments.conftest import tiny_encoder  # noqa: F401 (the session fixture)
from tests.fetch.loopback_http import LoopbackServer
from tests.reproduce.miniature import BEIR_URL, DPR, DUMP, EQ_ZIP, build_mirror

LIMIT = 12  # of the miniature's 40 questions per set


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory, java: None):
    folder, registry = build_mirror(tmp_path_factory.mktemp("miniature"))
    with LoopbackServer(folder) as server:
        yield server, registry


@pytest.fixture(scope="module")
def dpr_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workspace of the setups on DPR's passages (not DESIRE-ME's: its BEIR corpus is another)."""
    return tmp_path_factory.mktemp("dpr-setups") / "ws"


def _rows(ws: Workspace, setup: str) -> list[dict]:
    return ws.sql(f"SELECT * FROM reproduction WHERE setup = '{setup}' ORDER BY retriever, metric").to_pylist()


def _check_side_by_side(ws: Workspace, setup: str) -> list[dict]:
    """Every paper figure is in the table, beside a figure of the run, with the difference."""
    rows = _rows(ws, setup)
    figures = load_setup(setup).figures
    assert len(rows) == len(figures)
    for row in rows:
        assert row["measured"] is not None, row
        assert row["difference"] == pytest.approx(row["measured"] - row["paper"], abs=1e-6), row
        assert row["limited"] and row["source"]
    return rows


def _refused_then_resumed(server: LoopbackServer, ws_dir: Path, corrupt: str, cut: str,
                          run: Callable[[bool], Any]) -> Any:  # fmt: skip
    """The setup's fetch refuses a corrupted byte of `corrupt` (a file the registry gives a digest
    of) with nothing published; served whole, with the transfer of `cut` broken off in the middle,
    the same run resumes that transfer with a Range request and goes on to the table."""
    server.corrupt[corrupt] = 100
    run(True)
    slot = download_slot(ws_dir, f"https://{corrupt}")
    assert not slot.final.exists() and not slot.part.exists() and not slot.unpacked.exists()
    del server.corrupt[corrupt]
    half = (server.folder / cut).stat().st_size // 2
    server.cut_after[cut] = half
    result = run(False)
    assert [r["headers"].get("Range") for r in server.requests_for(cut)][-2:] == [None, f"bytes={half}-"]
    return result


def test_dpr_taser_nq_from_an_empty_workspace_through_the_command_line(cli, mirror, dpr_workspace: Path,
                                                                       tiny_encoder: str) -> None:  # noqa: F811
    server, registry = mirror
    ws_dir = dpr_workspace
    args = ["-w", str(ws_dir), "reproduce", "dpr-taser-nq", "--mirror", server.url, "--registry", str(registry),
            "--max-steps", "1", "--limit", str(LIMIT), "--base", tiny_encoder]  # fmt: skip

    def run(refused: bool) -> str:
        result = cli(*args, ok=not refused)
        if refused:
            assert result.exit_code == 1 and "is corrupt or was changed at the source, and is not published" in result.output
        return result.output

    out = _refused_then_resumed(server, ws_dir, f"{DPR}/wikipedia_split/psgs_w100.tsv.gz",
                                f"{DPR}/data/retriever/biencoder-nq-train.json.gz", run)  # fmt: skip
    ws = Workspace.open_existing(ws_dir)
    rows = _check_side_by_side(ws, "dpr-taser-nq")
    paper = {(r["retriever"], r["metric"]): r for r in rows}
    assert paper[("TASER", "R@20")]["paper"] == pytest.approx(0.837)
    for line in ("TASER", "DPR", "BM25"):
        assert any(cells.split()[:1] == [line] and "83.7" in cells or line != "TASER" for cells in out.splitlines())
    assert "smoke-sized run" in out and "one round, no hybrids" in out and "SELECT * FROM reproduction WHERE setup = 'dpr-taser-nq'" in out
    # the DPR files came from the mirror, each whole
    assert server.requests_for(f"{DPR}/data/retriever/nq-test.qa.csv")
    # resumable: the same command again recognises every step and keeps the same figures
    again = cli(*args).output
    assert "done before (recognised from the workspace)" in again
    assert _rows(ws, "dpr-taser-nq") == rows


# Per further setup: the file whose corrupted byte its fetch refuses, and the file whose cut transfer
# it resumes, among those it downloads; the dual-encoder comparison downloads nothing new after
# dpr-taser-nq (the same DPR files: each is checked again on this use, never trusted).
FAULTS = {
    "taser-entityquestions": (f"{DPR}/data/retriever/biencoder-trivia-train.json.gz", EQ_ZIP),
    "desire-me-fever": (BEIR_URL.removeprefix("https://"), f"{DUMP}/enwiki-20250601-categorylinks.sql.gz"),
}


@pytest.mark.every_setup
@pytest.mark.parametrize("setup", ["taser-entityquestions", "dual-encoder-comparison", "desire-me-fever"])
def test_each_setup_runs_on_its_miniature(prefect_harness: str, mirror, dpr_workspace: Path, tmp_path: Path,
                                          setup: str, tiny_encoder: str) -> None:  # noqa: F811
    from odqa.flows.compositions.reproduce import reproduce_flow
    from odqa.pipelines.downloads.checksums import ChecksumMismatch

    server, registry = mirror
    ws_dir = tmp_path / "ws" if setup == "desire-me-fever" else dpr_workspace

    def run(refused: bool) -> Any:
        call = partial(reproduce_flow, setup=setup, registry=str(registry), mirror=server.url, max_steps=1,
                       limit=LIMIT, base=tiny_encoder, workspace=str(ws_dir))  # fmt: skip
        if not refused:
            return call()
        with pytest.raises(ChecksumMismatch, match="is not published"):
            call()

    report = _refused_then_resumed(server, ws_dir, *FAULTS[setup], run) if setup in FAULTS else run(False)
    ws = Workspace.open_existing(ws_dir)
    rows = _check_side_by_side(ws, setup)
    assert [r["measured"] for r in report.figures] == [r["measured"] for r in sorted(rows, key=_figure_order(setup))]
    assert all(cell["run"] != "-" for cell in report.table())


def _figure_order(setup: str):
    order = {(f.retriever, f.metric): i for i, f in enumerate(load_setup(setup).figures)}
    return lambda row: order[(row["retriever"], row["metric"])]
