"""A workspace is something odqa made (issue 41): readers refuse any other folder and create
nothing in it; writers make a new or empty folder a workspace and refuse one holding other files,
unless `odqa init` marked it; workspaces made before the marker are still recognised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import odqa
from odqa.flows.cli import main
from odqa.service.app import create_app
from odqa.storage import Workspace

MARKER_FILE = ".odqa-workspace"


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """A folder of the user's own (say, the home folder) that odqa never made a workspace."""
    folder = tmp_path / "home"
    (folder / "photos").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine\n", encoding="utf-8")
    return folder


def _contents(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def _odqa(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("verb", [["sql", "SELECT 1"], ["search", "a question"]], ids=["sql", "search"])
def test_read_verbs_refuse_a_folder_odqa_did_not_make_and_create_nothing(foreign: Path, tmp_path: Path,
                                                                         verb: list[str]) -> None:  # fmt: skip
    before = _contents(foreign)
    result = _odqa("-w", str(foreign), *verb)
    assert result.exit_code == 1 and "odqa did not make it a workspace" in result.output, result.output
    assert _contents(foreign) == before
    missing = tmp_path / "typo"
    result = _odqa("-w", str(missing), *verb)
    assert result.exit_code == 1 and f"no odqa workspace at {missing}" in result.output, result.output
    assert not missing.exists()


def test_the_api_and_the_service_refuse_it_too(foreign: Path) -> None:
    before = _contents(foreign)
    with pytest.raises(FileNotFoundError, match="odqa did not make it a workspace"):
        odqa.open_workspace(foreign)
    with pytest.raises(FileNotFoundError, match="odqa did not make it a workspace"):
        create_app(foreign)
    assert _contents(foreign) == before
    with pytest.raises(FileNotFoundError):
        Workspace.open_existing(foreign)
    assert _contents(foreign) == before


def test_writers_refuse_a_folder_holding_other_files(foreign: Path) -> None:
    before = _contents(foreign)
    with pytest.raises(FileNotFoundError, match="is not an odqa workspace and is not empty.*odqa init"):
        Workspace.resolve(foreign)
    passages = foreign.parent / "passages.tsv"  # a good file: the folder, not the file, is refused
    passages.write_text("id\ttext\ttitle\np1\tParis is in France.\tParis\n", encoding="utf-8")
    result = _odqa("-w", str(foreign), "import", "passages", "--format", "dpr-tsv", str(passages))
    assert result.exit_code == 1 and "is not an odqa workspace and is not empty" in result.output, result.output
    assert _contents(foreign) == before


def test_writers_make_a_new_or_empty_folder_a_workspace(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "new", tmp_path / "empty"):
        ws = Workspace.resolve(folder)
        assert json.loads((ws.root / MARKER_FILE).read_text(encoding="utf-8"))["odqa"] == "workspace"
        assert odqa.open_workspace(folder).root == ws.root


def test_odqa_init_marks_a_folder_and_readers_then_accept_it(foreign: Path) -> None:
    result = _odqa("init", str(foreign))
    assert result.exit_code == 0 and str(foreign) in result.output, result.output
    assert (foreign / MARKER_FILE).is_file() and (foreign / "notes.txt").read_text(encoding="utf-8") == "mine\n"
    result = _odqa("-w", str(foreign), "sql", "SELECT count(*) AS n FROM passages")
    assert result.exit_code == 0 and "0" in result.output, result.output
    assert Workspace.resolve(foreign).root == foreign  # writers too


def test_a_workspace_made_before_the_marker_is_recognised_and_marked(workspace: Workspace) -> None:
    with workspace.transaction("seed") as tx:
        tx.write("passages", [{"passage_id": "p1", "title": "T", "text": "x", "position": 0}], source="seed")
    (workspace.root / MARKER_FILE).unlink()  # as a workspace of an earlier odqa: snapshot.json and tables
    assert odqa.open_workspace(workspace.root).sql("SELECT count(*) AS n FROM passages").column("n").to_pylist() == [1]
    assert (workspace.root / MARKER_FILE).is_file()
