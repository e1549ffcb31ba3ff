"""Read leases: a running reader's table files survive later commits; a dead reader's do not."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from odqa.storage import Workspace, read_leases
from odqa.storage.read_leases import TableVersionGone, leases_dir, live_leases

REPO = Path(__file__).resolve().parents[2]


def _passages(ids: list[str]) -> list[dict]:
    return [{"passage_id": i, "article_id": 1, "title": "T", "text": f"text {i}", "position": n} for n, i in enumerate(ids)]


def _replace(ws: Workspace, ids: list[str], parts: int = 1) -> None:
    """One commit that replaces every passage (in `parts` files)."""
    with ws.transaction("import") as tx:
        tx.replace_table("passages")
        size = -(-len(ids) // parts)
        for n in range(parts):
            tx.write("passages", _passages(ids[n * size:(n + 1) * size]), source="src", part=f"p{n}")


def _files(ws: Workspace) -> set[Path]:
    return set((ws.root / "tables" / "passages").glob("*.parquet"))


def test_a_leased_snapshot_keeps_its_files_through_later_commits(workspace: Workspace) -> None:
    _replace(workspace, ["a", "b"])
    with workspace.reading("passages", what="a long build") as snapshot:
        held = {workspace.root / e.path for e in snapshot.files("passages")}
        for round_ in range(5):  # more than the snapshots a commit keeps
            _replace(workspace, [f"r{round_}"])
        assert held <= _files(workspace)
        rows = workspace.read_table("passages", snapshot=snapshot).column("passage_id").to_pylist()
        assert rows == ["a", "b"]
        assert [lease["what"] for lease in live_leases(workspace.root)] == ["a long build"]
    assert live_leases(workspace.root) == []
    _replace(workspace, ["last"])  # the next commit collects what no one reads any more
    assert not held & _files(workspace)


def test_a_scan_reads_one_version_while_commits_replace_it(workspace: Workspace) -> None:
    """(The files are checked on disk: pyarrow reads a small table ahead, so a scan of one would
    finish even after its files were deleted; a big table's would fail, see
    benchmarks/soak_read_leases.py.)"""
    ids = [f"p{i:03d}" for i in range(40)]
    _replace(workspace, ids, parts=4)
    read = _files(workspace)
    scan = workspace.scan("passages", columns=["passage_id"], batch_size=5)
    seen = next(scan).column(0).to_pylist()
    for round_ in range(5):
        _replace(workspace, [f"new{round_}"])
    assert read <= _files(workspace)  # kept while the scan runs
    for batch in scan:
        seen += batch.column(0).to_pylist()
    assert seen == ids
    assert live_leases(workspace.root) == []  # the finished scan dropped its lease
    _replace(workspace, ["last"])
    assert not read & _files(workspace)


def test_reading_a_version_finds_it_in_a_recent_snapshot(workspace: Workspace) -> None:
    _replace(workspace, ["old"])
    version = workspace.table_version("passages")
    _replace(workspace, ["newer"])
    with workspace.reading_version("passages", version, what="bm25 build") as snapshot:
        assert snapshot.table_version("passages") == version
        assert workspace.read_table("passages", snapshot=snapshot).column("passage_id").to_pylist() == ["old"]
    for round_ in range(4):  # nobody reads `version` now: its files go
        _replace(workspace, [f"r{round_}"])
    gone = workspace.reading_version("passages", version, what="bm25 build")
    with pytest.raises(TableVersionGone, match=f"version {version} is no longer in"), gone:
        pass


@contextmanager
def _holding(root: Path, holder: str) -> Iterator[subprocess.Popen]:
    """A second process inside the `with` statement `holder` (of the workspace at `root`), until
    the block ends: then it is SIGKILLed, its clean-up never run."""
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from odqa.storage import Workspace
        from odqa.storage.read_leases import leases_locked
        root = Path({str(root)!r})
        with {holder}:
            print("held", flush=True)
            time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_a_killed_readers_lease_is_dropped_by_the_next_commit(workspace: Workspace) -> None:
    _replace(workspace, ["a"])
    held = _files(workspace)
    with _holding(workspace.root, 'Workspace.resolve(root).reading("passages", what="killed reader")'):
        for round_ in range(4):
            _replace(workspace, [f"r{round_}"])
        assert held <= _files(workspace)  # alive: kept
        assert [lease["what"] for lease in live_leases(workspace.root)] == ["killed reader"]
    assert len(list(leases_dir(workspace.root).glob("*.json"))) == 1  # a kill runs no clean-up
    _replace(workspace, ["after"])
    assert not held & _files(workspace)
    assert list(leases_dir(workspace.root).glob("*.json")) == []


def _lease_file(ws: Workspace, name: str, record: dict, paths: list[str]) -> Path:
    leases_dir(ws.root).mkdir(parents=True, exist_ok=True)
    path = leases_dir(ws.root) / name
    path.write_text(json.dumps({**record, "paths": paths, "what": name, "since": time.time()}))
    return path


def test_a_reused_pid_is_not_the_reader_and_another_hosts_lease_lives_while_refreshed(workspace: Workspace) -> None:
    _replace(workspace, ["a"])
    paths = [e.path for e in workspace.snapshot().files("passages")]
    import socket

    here = socket.gethostname()
    reused = _lease_file(workspace, "reused.json", {"host": here, "pid": os.getpid(), "started": "1"}, paths)
    remote = _lease_file(workspace, "remote.json", {"host": "elsewhere", "pid": 1}, paths)
    assert read_leases.leased_paths(workspace.root) == set(paths)  # the remote one, refreshed just now
    assert not reused.exists()  # this pid's process started at another time: a dead reader's lease
    old = time.time() - read_leases.STALE_S - 5
    os.utime(remote, (old, old))
    for round_ in range(4):
        _replace(workspace, [f"r{round_}"])
    assert not remote.exists()
    assert not {workspace.root / p for p in paths} & _files(workspace)


def test_a_lease_is_refreshed_while_held(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read_leases, "REFRESH_S", 0.05)
    monkeypatch.setattr(read_leases, "_REFRESHER", read_leases._Refresher())
    _replace(workspace, ["a"])
    with workspace.reading("passages", what="refreshed"):
        lease = next(leases_dir(workspace.root).glob("*.json"))
        old = time.time() - 1000
        os.utime(lease, (old, old))
        deadline = time.monotonic() + 5
        while lease.stat().st_mtime < time.time() - 100 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lease.stat().st_mtime > time.time() - 100


def test_a_workspace_it_cannot_write_is_read_without_a_lease(workspace: Workspace,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    _replace(workspace, ["a"])

    def refused(root: Path, timeout_s: float = 600.0):
        raise PermissionError(errno.EACCES, "Permission denied", str(leases_dir(root)))

    monkeypatch.setattr(read_leases, "leases_locked", refused)
    assert workspace.read_table("passages").column("passage_id").to_pylist() == ["a"]
    assert [b.num_rows for b in workspace.scan("passages")] == [1]
    assert workspace.sql("SELECT count(*) AS n FROM passages").column("n").to_pylist() == [1]


def test_a_snapshot_whose_files_are_gone_says_so(workspace: Workspace) -> None:
    _replace(workspace, ["a"])
    snapshot = workspace.snapshot()
    for round_ in range(4):
        _replace(workspace, [f"r{round_}"])
    with pytest.raises(TableVersionGone, match=f"of snapshot {snapshot.version} are gone"):
        next(workspace.scan("passages", snapshot=snapshot))


def test_junk_in_the_leases_folder_neither_breaks_a_commit_nor_keeps_files(workspace: Workspace) -> None:
    _replace(workspace, ["a"])
    held = _files(workspace)
    folder = leases_dir(workspace.root)
    (folder / "folder.json").mkdir()
    (folder / "broken.json").write_text("{not json")
    (folder / "paths-not-a-list.json").write_text(json.dumps({"host": "elsewhere", "pid": 1, "paths": 7}))
    (folder / "binary.json").write_bytes(b"\xff\xfe\x00")
    os.mkfifo(folder / "pipe.json")  # read, it would block the collection for ever
    (folder / "link.json").symlink_to("/dev/zero")  # read through, it would never end
    (folder / "huge.json").write_bytes(b" " * (read_leases.MAX_LEASE_BYTES + 1))
    for round_ in range(4):
        _replace(workspace, [f"r{round_}"])
    assert not held & _files(workspace)
    assert sorted(p.name for p in folder.glob("*.json")) == ["folder.json"]  # a folder is left for its maker


def test_a_commit_skips_its_collection_while_a_stopped_reader_holds_the_lease_lock(
        workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from odqa.storage import tables

    monkeypatch.setattr(tables, "LEASES_WAIT_S", 0.5)
    _replace(workspace, ["a"])
    held = _files(workspace)
    with _holding(workspace.root, "leases_locked(root)"):
        for round_ in range(4):
            _replace(workspace, [f"r{round_}"])  # committed, the garbage left for later
        assert workspace.read_table("passages").column("passage_id").to_pylist() == ["r3"]
        assert held <= _files(workspace)
    _replace(workspace, ["after"])
    assert not held & _files(workspace)


def test_the_python_api_reads_one_version_in_a_reading_block(workspace: Workspace) -> None:
    import odqa

    _replace(workspace, ["a", "b"], parts=2)
    read = _files(workspace)
    ws = odqa.open_workspace(workspace.root)
    with ws.reading() as same:
        relation = same.duckdb("passages")
        for round_ in range(4):
            _replace(workspace, [f"r{round_}"])
        assert read <= _files(workspace)
        assert same.table("passages").column("passage_id").to_pylist() == ["a", "b"]
        assert same.sql("SELECT count(*) AS n FROM passages").to_pylist() == [{"n": 2}]
        assert relation.count("*").fetchall() == [(2,)]
        assert same.duckdb("passages").count("*").fetchall() == [(2,)]  # made in the block: the same version
    assert ws.table("passages").column("passage_id").to_pylist() == ["r3"]
    assert ws.sql("SELECT count(*) AS n FROM passages").to_pylist() == [{"n": 1}]
    _replace(workspace, ["last"])
    assert not read & _files(workspace)
