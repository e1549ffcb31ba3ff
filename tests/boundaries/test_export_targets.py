"""Writes never destroy what they did not make (issue 41, point 3).

Every verb that writes a path the user names (`odqa export passages|model|beir`, `retrieve
--trec`) refuses the workspace, a folder above it and the workspace's own folders, even with
--force; an existing file or non-empty folder without --force; and, with --force, a folder that
is not an earlier odqa export of the same kind. Replacing builds beside and renames, so a failed
write leaves the old content as it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from odqa.storage import Workspace
from odqa.storage.write_targets import (
    EXPORT_MARKER,
    WORKSPACE_ENTRIES,
    WriteRefused,
    check_file_target,
    check_folder_target,
    export_file,
    export_folder,
)
from tests.boundaries.conftest import workspace_state
from tests.models.filled_workspace import fill_workspace

KIND = "BEIR dataset"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The toy workspace (passages and questions) at tmp_path/ws."""
    root = tmp_path / "ws"
    fill_workspace(root)
    return root


def _refused(cli, root: Path, *args: str, expected: tuple[str, ...]) -> str:
    """Run `odqa -w root ARGS`, expecting a refusal holding `expected`, with the workspace unchanged."""
    before = workspace_state(root)
    result = cli("--workspace", str(root), *args, ok=False)
    assert result.exit_code != 0, result.output
    for text in expected:
        assert text in result.output, result.output
    assert workspace_state(root) == before
    return result.output


def _foreign_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "thesis.pdf").write_bytes(b"mine")
    return path


# --- the rule, on the functions every verb calls ------------------------------------------------


def test_the_workspace_its_ancestors_and_its_own_folders_are_refused_even_with_force(ws: Path, tmp_path: Path) -> None:
    link = tmp_path / "link-to-ws"
    link.symlink_to(ws)
    other = tmp_path / "other-ws"
    fill_workspace(other)
    for target, why in [(ws, "is the workspace"), (tmp_path, "is a folder above the workspace"),
                        (ws / "tables", "the workspace's own 'tables'"), (ws / "models" / "new", "inside the workspace's own 'models'"),
                        (ws / ".hidden", "own '.hidden'"), (link, "is the workspace"),
                        (other, "is an odqa workspace"), (other / "indexes" / "x", "own 'indexes'")]:  # fmt: skip
        with pytest.raises(WriteRefused, match="not even with --force") as refused:
            check_folder_target(target, ws, option="--out", kind=KIND, force=True)
        assert why in str(refused.value), str(refused.value)
    for target in (ws / "snapshot.json", ws / "tables" / "run.trec", link / "catalog.duckdb", ws / "snapshots" / "new"):
        with pytest.raises(WriteRefused, match="not even with --force"):
            check_file_target(target, ws, option="--trec", force=True)
    # a folder of the user's own inside the workspace is theirs to write
    assert check_folder_target(ws / "exports" / "beir", ws, option="--out", kind=KIND, force=False) == ws / "exports" / "beir"


def test_existing_targets_need_force_and_force_replaces_only_odqas_own_exports(ws: Path, tmp_path: Path) -> None:
    foreign = _foreign_folder(tmp_path / "mine")
    with pytest.raises(WriteRefused, match=r"exists and is not empty \(1 entries: 'thesis.pdf'\); pass --force"):
        check_folder_target(foreign, ws, option="--out", kind=KIND, force=False)
    with pytest.raises(WriteRefused, match="is not an earlier odqa export of a BEIR dataset"):
        check_folder_target(foreign, ws, option="--out", kind=KIND, force=True)
    with export_folder(tmp_path / "export", ws, option="--out", kind=KIND, force=False) as folder:
        (folder / "corpus.jsonl").write_text("{}\n")
    assert json.loads((tmp_path / "export" / EXPORT_MARKER).read_text())["kind"] == KIND
    with pytest.raises(WriteRefused, match="not an earlier odqa export of a sentence-transformers model"):
        check_folder_target(tmp_path / "export", ws, option="--out", kind="sentence-transformers model", force=True)
    assert check_folder_target(tmp_path / "export", ws, option="--out", kind=KIND, force=True) == tmp_path / "export"
    (tmp_path / "run.trec").write_text("mine\n")
    with pytest.raises(WriteRefused, match="run.trec exists; pass --force"):
        check_file_target(tmp_path / "run.trec", ws, option="--trec", force=False)
    with pytest.raises(WriteRefused, match="is a folder"):
        check_file_target(foreign, ws, option="--trec", force=True)
    assert (foreign / "thesis.pdf").read_bytes() == b"mine"


def test_a_failed_replacement_leaves_the_earlier_export_and_no_temporaries(ws: Path, tmp_path: Path) -> None:
    with export_folder(tmp_path / "export", ws, option="--out", kind=KIND, force=False) as folder:
        (folder / "corpus.jsonl").write_text("old\n")
    with pytest.raises(RuntimeError, match="export broke"), \
            export_folder(tmp_path / "export", ws, option="--out", kind=KIND, force=True) as folder:  # fmt: skip
        (folder / "corpus.jsonl").write_text("new, half")
        raise RuntimeError("export broke")
    assert (tmp_path / "export" / "corpus.jsonl").read_text() == "old\n"
    with pytest.raises(RuntimeError, match="export broke"), \
            export_file(tmp_path / "passages.tsv", ws, option="OUT", force=False) as staged:  # fmt: skip
        staged.write_text("half")
        raise RuntimeError("export broke")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "ws"]


_KILLED_EXPORT = """
import os, signal, sys
from pathlib import Path
from odqa.storage.atomic import atomic_text_file
from odqa.storage.write_targets import export_file
with export_file(Path(sys.argv[1]), Path(sys.argv[2]), option="OUT", force=False) as staged:
    with atomic_text_file(staged) as handle:  # as write_dpr_tsv writes it
        handle.write("id\\ttext\\ttitle\\n" + "half a passage\\n" * 1000)
        handle.flush()
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_what_a_killed_file_export_left_is_reclaimed_by_the_next_export(ws: Path, tmp_path: Path) -> None:
    """A SIGKILLed export leaves its hidden partial copy (as big as the file); the next export to the
    same path deletes it, and leaves a live writer's alone."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    out = tmp_path / "out"
    out.mkdir()
    target = out / "passages.tsv"
    killed = subprocess.run([sys.executable, "-c", _KILLED_EXPORT, str(target), str(ws)], cwd=REPO_ROOT,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True)  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    left = sorted(p.name for p in out.iterdir())
    assert left and all(name.startswith(".") for name in left) and not target.exists(), left
    live = out / f".passages.tsv.0123abcd.writing-{os.getpid()}"  # another export of this path, still running
    live.write_text("being written\n")
    with export_file(target, ws, option="OUT", force=False) as staged:
        staged.write_text("id\ttext\ttitle\n")
    assert sorted(p.name for p in out.iterdir()) == sorted([live.name, "passages.tsv"])
    assert target.read_text() == "id\ttext\ttitle\n"


def test_a_file_that_appears_while_an_export_is_written_is_not_overwritten(ws: Path, tmp_path: Path) -> None:
    target = tmp_path / "passages.tsv"
    with pytest.raises(WriteRefused, match="passages.tsv exists; pass --force"), \
            export_file(target, ws, option="OUT", force=False) as staged:  # fmt: skip
        staged.write_text("odqa's\n")
        target.write_text("someone else's\n")
    assert target.read_text() == "someone else's\n"


def test_every_top_level_entry_odqa_makes_is_in_the_list(ws: Path, cli) -> None:
    """WORKSPACE_ENTRIES names what storage, the command line (logs), the Prefect server and the
    watched folder make, by the names their modules use; a workspace after a few verbs holds
    nothing else."""
    from odqa.flows.backend.local_server import STATE_DIR
    from odqa.flows.cli.terminal import LOG_DIR
    from odqa.flows.compositions.incoming import INCOMING

    assert {STATE_DIR, LOG_DIR, INCOMING} <= WORKSPACE_ENTRIES
    workspace = Workspace.resolve(ws)
    for folder in (workspace.indexes_dir, workspace.models_dir, workspace.plots_dir, workspace.tmp_dir,
                   workspace.cache_dir):  # fmt: skip
        assert folder.name in WORKSPACE_ENTRIES
    cli("--workspace", str(ws), "sql", "SELECT count(*) FROM passages")
    made = {p.name for p in ws.iterdir() if not p.name.startswith(".")}
    assert made <= WORKSPACE_ENTRIES, made - WORKSPACE_ENTRIES


# --- the verbs ----------------------------------------------------------------------------------------


def test_export_beir_refuses_the_workspace_and_replaces_only_its_own_export(cli, ws: Path, tmp_path: Path) -> None:
    beir = ("export", "beir", "toy", "train", "--force", "--out")
    for target in (ws, tmp_path, ws / "tables"):  # the workspace, a folder above it, one of its own
        _refused(cli, ws, *beir, str(target), expected=("not even with --force", str(ws)))
    out = tmp_path / "beir"
    cli("--workspace", str(ws), "export", "beir", "toy", "train", "--out", str(out))
    (out / "stale.txt").write_text("from an earlier export")
    _refused(cli, ws, "export", "beir", "toy", "train", "--out", str(out), expected=("exists and is not empty", "--force"))
    assert (out / "stale.txt").is_file()
    cli("--workspace", str(ws), *beir, str(out))
    assert sorted(p.name for p in out.iterdir()) == [EXPORT_MARKER, "corpus.jsonl", "qrels", "queries.jsonl"]
    foreign = _foreign_folder(tmp_path / "mine")
    _refused(cli, ws, *beir, str(foreign), expected=("not an earlier odqa export",))
    assert sorted(p.name for p in foreign.iterdir()) == ["thesis.pdf"]


def test_export_model_into_the_workspace_is_refused_and_the_workspace_survives(cli, ws: Path, tmp_path: Path,
                                                                                tiny_checkpoint: str) -> None:  # fmt: skip
    """The issue's case: `odqa export model M --out <workspace>` deleted the whole workspace."""
    model = ("export", "model", tiny_checkpoint, "--out")
    _refused(cli, ws, *model, str(ws), "--force", expected=("is the workspace", "not even with --force"))
    _refused(cli, ws, *model, str(ws / "models"), expected=("the workspace's own 'models'",))
    assert Workspace.resolve(ws).rows("passages") == 16
    out = tmp_path / "exported"
    cli("--workspace", str(ws), *model, str(out))
    _refused(cli, ws, *model, str(out), expected=("exists and is not empty", "--force"))
    cli("--workspace", str(ws), *model, str(out), "--force")
    assert (out / "modules.json").is_file()
    assert json.loads((out / EXPORT_MARKER).read_text())["model"] == Path(tiny_checkpoint).name  # no local path


def test_export_passages_replaces_an_existing_file_only_with_force(cli, ws: Path, tmp_path: Path) -> None:
    out = tmp_path / "psgs.tsv"
    out.write_text("mine\n")
    _refused(cli, ws, "export", "passages", str(out), expected=("psgs.tsv exists; pass --force",))
    assert out.read_text() == "mine\n"
    cli("--workspace", str(ws), "export", "passages", "--force", str(out))
    assert out.read_text().startswith("id\ttext\ttitle\n") and len(out.read_text().splitlines()) == 17
    _refused(cli, ws, "export", "passages", "--force", str(ws / "snapshot.json"), expected=("not even with --force",))


def test_retrieve_refuses_an_existing_trec_file_before_it_retrieves(cli, ws: Path, tmp_path: Path) -> None:
    trec = tmp_path / "run.trec"
    trec.write_text("mine\n")
    args = ("retrieve", "--dataset", "toy", "--split", "dev", "--run", "r", "--trec")
    _refused(cli, ws, *args, str(trec), expected=("--trec", "run.trec exists; pass --force"))
    _refused(cli, ws, *args, str(ws / "indexes" / "r.trec"), "--force", expected=("not even with --force",))
    assert trec.read_text() == "mine\n"


def test_a_trec_export_replaces_an_earlier_file_and_card_only_with_force(ws: Path, tmp_path: Path) -> None:
    from odqa.flows.stages.retrieve import write_trec
    from odqa.storage.runs import run_source, with_run_name

    workspace = Workspace.resolve(ws)
    rows = pa.table({"question_id": ["toy-6"], "passage_id": ["p6"], "rank": pa.array([1], pa.int32()),
                     "score": [1.5]})  # fmt: skip
    with workspace.transaction("run:r", fingerprint="f") as tx:  # a run with its ledger record, as retrieve makes
        tx.write("runs", with_run_name(rows, "r"), source=run_source("r"))
        tx.report = {"run": "r", "retriever": "bm25", "dataset": "toy", "split": "dev", "k": 1}
    trec, card = tmp_path / "r.trec", tmp_path / "r.trec.yaml"
    assert write_trec(workspace, "r", str(trec)) == (str(trec), 1)
    assert '"file": "r.trec"' in card.read_text()
    trec.write_text("edited by hand\n")
    with pytest.raises(WriteRefused, match="r.trec exists; pass --force"):
        write_trec(workspace, "r", str(trec))
    assert trec.read_text() == "edited by hand\n"
    trec.unlink()
    with pytest.raises(WriteRefused, match="r.trec.yaml exists; pass --force"):  # the card is a file of its own
        write_trec(workspace, "r", str(trec))
    assert not trec.exists()
    write_trec(workspace, "r", str(trec), force=True)
    assert trec.read_text() == "toy-6 Q0 p6 1 1.5 r\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.trec", "r.trec.yaml", "ws"]
