"""An import whose file is refused at its first records (or whose folder lacks a file its format
needs) is refused before the verb starts the workspace's Prefect server, and creates no
workspace: the import's own readers check the file's head first (`pipelines.import_heads`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from odqa.flows.backend.local_server import ServerPaths, running_server, stop_server
from odqa.flows.cli import main


def _files(root: Path) -> dict[str, Path]:
    root.mkdir()
    (root / "no-answers.qas.tsv").write_text("who wrote hamlet?\n", encoding="utf-8")
    (root / "two-fields.tsv").write_text("id\ttext\ttitle\n1\tonly two fields\n", encoding="utf-8")
    (root / "short.trec").write_text("q1 Q0 d1 1\n", encoding="utf-8")
    beir = root / "beir"
    beir.mkdir()
    (beir / "corpus.jsonl").write_text('{"_id": "1", "text": "x"}\n', encoding="utf-8")
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "x?"}\n', encoding="utf-8")
    return {"questions": root / "no-answers.qas.tsv", "passages": root / "two-fields.tsv",
            "run": root / "short.trec", "beir": beir}  # fmt: skip


CASES = [
    (["import", "questions", "--format", "dpr-qas", "--dataset", "d", "--split", "dev"], "questions",
     "no-answers.qas.tsv:1: expected question<TAB>[answers]"),
    (["import", "passages", "--format", "dpr-tsv"], "passages", "two-fields.tsv:2: expected 3 tab-separated fields"),
    (["import", "run", "--run", "r1"], "run", "short.trec:1: expected 6 fields"),
    (["import", "questions", "--format", "beir", "--dataset", "d", "--split", "dev"], "beir",
     "BEIR dataset has no qrels/dev.tsv"),
]  # fmt: skip


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A workspace path, with no Prefect server configured: a verb that runs flows would start the
    workspace's own (stopped again here, should one have started)."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))  # no profile naming a server
    monkeypatch.delenv("PREFECT_PROFILES_PATH", raising=False)
    root = tmp_path / "ws"
    yield root
    if running_server(root) is not None:
        stop_server(root)


@pytest.mark.parametrize(("verb", "file", "message"), CASES)
def test_a_refused_import_starts_no_server(workspace: Path, tmp_path: Path, verb: list[str], file: str,
                                           message: str) -> None:  # fmt: skip
    path = _files(tmp_path / "input")[file]
    result = CliRunner().invoke(main, ["-w", str(workspace), *verb, str(path)])
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert "Prefect server" not in result.output
    assert running_server(workspace) is None and not ServerPaths(workspace).home.exists()
    assert not workspace.exists()  # not even the workspace was created
