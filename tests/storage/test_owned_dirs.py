"""Staging and scratch folders of a killed process are removed by the next one; a live one's never."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from odqa.storage import Workspace
from odqa.storage.owned_dirs import OWNER_FILE, OwnedDir, reclaim_abandoned

REPO = Path(__file__).resolve().parents[2]


def _killed_mid_import(root: Path) -> None:
    """A process that stages a part and holds a scratch folder, then is SIGKILLed (as kill -9 does)."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from odqa.storage import Workspace
        ws = Workspace.resolve({str(root)!r})
        rows = [{{"passage_id": str(i), "title": "t", "text": "x " * 50, "position": i}} for i in range(1000)]
        with ws.scratch("import-questions") as tmp, ws.transaction("import", fingerprint="f") as tx:
            (tmp / "passages_to_dedupe.parquet").write_bytes(b"spill" * 1000)
            tx.write("passages", rows, source="src", part="p0")
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO)
    assert proc.returncode == -9


def _left(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists() else []


def test_killed_runs_staging_and_scratch_are_reclaimed(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    _killed_mid_import(root)
    staging, scratch = _left(root / "staging"), _left(root / "tmp")
    assert len(staging) == 1 and list(staging[0].rglob("*.parquet"))  # what kill -9 leaves behind
    assert len(scratch) == 1 and (scratch[0] / "passages_to_dedupe.parquet").exists()
    ws = Workspace.resolve(root)
    assert ws.rows("passages") == 0  # never visible
    with ws.transaction("next", fingerprint="g") as tx:
        tx.write("passages", [{"passage_id": "a", "title": "t", "text": "x", "position": 0}], source="s")
        assert _left(root / "staging") == [tx.staging]  # the killed run's folder is gone, this one stays
    with ws.scratch("import-questions") as tmp:
        assert _left(root / "tmp") == [tmp]
    assert _left(root / "staging") == [] and _left(root / "tmp") == []
    assert ws.rows("passages") == 1


def test_a_live_owners_folder_is_left_alone(tmp_path: Path) -> None:
    """Another process's folder in use (its owner file locked) survives a reclaim, until it dies."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from pathlib import Path
            from odqa.storage.owned_dirs import OwnedDir
            owned = OwnedDir.create(Path({str(tmp_path)!r}), "theirs")
            print("ready", flush=True)
            sys.stdin.readline()
            """)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "ready"
        (tmp_path / "legacy").mkdir()  # no owner file: an older odqa's folder, never guessed at
        assert reclaim_abandoned(tmp_path) == []
        mine = OwnedDir.create(tmp_path, "mine")
        assert (tmp_path / "theirs" / OWNER_FILE).exists() and (tmp_path / "legacy").exists()
        assert reclaim_abandoned(tmp_path) == []  # our own folder is held too
    finally:
        holder.kill()
        holder.wait()
    assert reclaim_abandoned(tmp_path) == ["theirs"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["legacy", "mine"]
    mine.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["legacy"]


def test_a_folder_made_on_another_host_is_not_judged(tmp_path: Path) -> None:
    """On a shared file system an flock may be visible to its own machine only: a folder whose
    owner file names another host is never reclaimed from here, even when its lock is free."""
    owned = OwnedDir.create(tmp_path, "elsewhere")
    owned.release(remove=False)  # its lock dropped, as if its owner died
    (tmp_path / "elsewhere" / OWNER_FILE).write_text('{"pid": 1, "host": "another-machine"}', encoding="utf-8")
    assert reclaim_abandoned(tmp_path) == [] and (tmp_path / "elsewhere").exists()
