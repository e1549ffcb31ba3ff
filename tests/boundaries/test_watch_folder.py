"""The watch folder takes only complete files, all or nothing (issue 41, point 1): a growing or
just-changed file and temporary names wait; links, hard links and special files are refused by
name, never read; one run commits every file it took or none, setting a malformed one aside; a
changed file replaces its rows; and no byte of a refused or malformed file reaches a message."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odqa.flows.compositions.incoming import REJECTED, look_at
from odqa.flows.compositions.ingest_run import IngestRunReport, MalformedFilesError, ingest_together
from odqa.storage import Workspace
from odqa.storage.locks import WriterBusy
from tests.boundaries.conftest import workspace_state

HEADER = "id\ttext\ttitle\n"
SECRET = "SECRET-7f3a-MARKER"
SETTLE = 30.0


def _tsv(path: Path, rows: list[tuple[str, str, str]], settled: bool = True) -> Path:
    path.write_text(HEADER + "".join(f"{i}\t{t}\t{h}\n" for i, t, h in rows), encoding="utf-8")
    if settled:
        _age(path)
    return path


def _age(path: Path, seconds: float = 3600) -> None:
    """Set the file's mtime into the past: as if it landed an hour ago."""
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def _run(ws: Workspace, folder: Path) -> IngestRunReport:
    return ingest_together(ws, look_at(folder, settle_seconds=SETTLE))


def _tables_state(ws: Workspace) -> dict[str, str]:
    """The workspace's files but incoming/ (where the run sets malformed files aside)."""
    return {name: digest for name, digest in workspace_state(ws.root).items() if not name.startswith("incoming/")}


def _ids(ws: Workspace) -> list[str]:
    return sorted(ws.sql("SELECT passage_id FROM passages").column("passage_id").to_pylist())


@pytest.fixture
def incoming(tmp_path: Path) -> Path:
    folder = Workspace.resolve(tmp_path / "ws").root / "incoming"
    folder.mkdir()
    return folder


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the folder whose every line would be a valid passage: only a link leads to it."""
    path = tmp_path / "outside" / "secret.tsv"
    path.parent.mkdir()
    return _tsv(path, [("s1", f"{SECRET} the password", "Secrets")])


def test_a_growing_file_waits_until_unchanged_for_the_settle_time(workspace: Workspace, incoming: Path) -> None:
    growing = incoming / "new.tsv"
    growing.write_text(HEADER + "1\tThe Eiffel Tower is in Paris.\tEiffel To", encoding="utf-8")  # cut mid-title
    first = _run(workspace, incoming)
    assert first.added == [] and "within the settle time of 30 s" in first.left["new.tsv"], first
    assert workspace.rows("passages") == 0
    with open(growing, "a", encoding="utf-8") as handle:
        handle.write("wer\n2\tIt is 330 metres tall.\tEiffel Tower\n")
    _age(growing)
    second = _run(workspace, incoming)
    assert second.added == ["new.tsv"] and second.left == {}, second
    titles = workspace.sql("SELECT DISTINCT title FROM passages").column("title").to_pylist()
    assert titles == ["Eiffel Tower"]


def test_a_file_dated_in_the_future_waits_saying_so(workspace: Workspace, incoming: Path) -> None:
    """A modification time ahead of the clock (an archive's, another machine's) is not a file
    'changed 0 s ago': the run says the time is in the future, and how to take the file."""
    future = _tsv(incoming / "a.tsv", [("a1", "From a machine whose clock runs ahead.", "A")], settled=False)
    _age(future, seconds=-10 * 24 * 3600)
    report = _run(workspace, incoming)
    assert report.added == [] and "in the future" in report.left["a.tsv"] and "touch it" in report.left["a.tsv"]
    os.utime(future, (time.time() - 3600, time.time() - 3600))
    assert _run(workspace, incoming).added == ["a.tsv"]


def test_temporary_names_are_never_taken(workspace: Workspace, incoming: Path) -> None:
    names = [".new.tsv", "new.tsv.part", "new.tsv.tmp", "new.tsv.partial", "new.tsv.crdownload", "new.tsv~", "~new.tsv"]
    for number, name in enumerate(names):
        _tsv(incoming / name, [(str(number), "text", "Title")])
    report = _run(workspace, incoming)
    assert sorted(report.left) == sorted(names) and report.added == [], report
    assert workspace.rows("passages") == 0
    (incoming / "new.tsv.part").rename(incoming / "new.tsv")  # the writer's last step
    assert _run(workspace, incoming).added == ["new.tsv"]


def test_links_and_special_files_are_refused_by_name_and_never_read(workspace: Workspace, tmp_path: Path,
                                                                   incoming: Path, secret: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    (incoming / "link.tsv").symlink_to(secret)
    beir = tmp_path / "outside" / "beir"
    beir.mkdir()
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "b1", "text": SECRET}) + "\n", encoding="utf-8")
    (incoming / "linked-beir").symlink_to(beir)
    (incoming / "beir").mkdir()
    (incoming / "beir" / "corpus.jsonl").symlink_to(beir / "corpus.jsonl")
    os.link(secret, incoming / "hard.tsv")
    os.mkfifo(incoming / "pipe.tsv")
    _tsv(incoming / "good.tsv", [("g1", "A good passage.", "Good")])
    watched = tmp_path / "watched"  # the watched folder itself may be given as a link
    watched.symlink_to(incoming)
    with caplog.at_level(logging.DEBUG):
        report = ingest_together(workspace, look_at(watched, settle_seconds=SETTLE))
    assert report.added == ["good.tsv"] and _ids(workspace) == ["g1"], report
    assert set(report.refused) == {"link.tsv", "linked-beir", "beir", "hard.tsv", "pipe.tsv"}, report
    assert "symbolic link" in report.refused["link.tsv"] and "hard link" in report.refused["hard.tsv"]
    shown = f"{report.as_dict()}\n{caplog.text}"
    assert SECRET not in shown and str(secret.parent) not in shown, shown


def test_a_malformed_file_fails_the_run_before_anything_is_committed(workspace: Workspace, incoming: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    _tsv(incoming / "a-good.tsv", [("g1", "A good passage.", "Good")])
    (incoming / "b-bad.tsv").write_text(f"{HEADER}b1\tfine\tFine\nb2\t{SECRET} has no title\n", encoding="utf-8")
    _age(incoming / "b-bad.tsv")
    (incoming / "c-header.tsv").write_text(f"root:{SECRET}:19000:0:99999:7:::\n", encoding="utf-8")  # like /etc/shadow
    _age(incoming / "c-header.tsv")
    before = _tables_state(workspace)
    with caplog.at_level(logging.DEBUG), pytest.raises(MalformedFilesError) as refused:
        _run(workspace, incoming)
    message = str(refused.value)
    assert _tables_state(workspace) == before and workspace.rows("passages") == 0
    assert f"{incoming / 'b-bad.tsv'}:3: expected 3 tab-separated fields" in message, message
    assert f"{incoming / 'c-header.tsv'}:1: expected the header" in message, message
    assert "a-good.tsv" in message and "taken by the next run" in message, message
    assert SECRET not in message + caplog.text
    set_aside = sorted(p.name for p in (incoming / REJECTED).iterdir())
    assert [n.split("-", 1)[1] for n in set_aside] == ["b-bad.tsv", "b-bad.tsv.why", "c-header.tsv", "c-header.tsv.why"]
    assert not (incoming / "b-bad.tsv").exists()
    again = _run(workspace, incoming)  # the next run takes the good file; rejected/ is not an input
    assert again.added == ["a-good.tsv"] and "rejected" in again.ignored and _ids(workspace) == ["g1"], again


@pytest.mark.parametrize("made", ["link to a folder outside", "link to a folder inside", "file"])
def test_a_rejected_that_is_no_folder_of_its_own_is_never_written_through(workspace: Workspace, incoming: Path,
                                                                         tmp_path: Path, made: str) -> None:  # fmt: skip
    """`rejected` is an entry of the watched folder: whoever drops files there can make it a link.
    A malformed file is then not set aside (it stays, the run says so) and nothing is moved or
    written where the link leads."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    if made == "file":
        (incoming / REJECTED).write_text("not a folder\n", encoding="utf-8")
    else:
        target = outside if made.endswith("outside") else incoming / "sub"
        target.mkdir(exist_ok=True)
        (incoming / REJECTED).symlink_to(target)
    _tsv(incoming / "a-good.tsv", [("g1", "A good passage.", "Good")])
    (incoming / "b-bad.tsv").write_text(f"{HEADER}b1\tno title\n", encoding="utf-8")
    _age(incoming / "b-bad.tsv")
    with pytest.raises(MalformedFilesError) as refused:
        _run(workspace, incoming)
    assert "taken by the next run" not in str(refused.value)  # the malformed file stays: it fails that run too
    assert f"{incoming / 'b-bad.tsv'}:2: expected 3 tab-separated fields" in str(refused.value)
    assert "(fix or remove it)" in str(refused.value) and "set aside" not in str(refused.value)
    assert (incoming / "b-bad.tsv").is_file() and list(outside.iterdir()) == []
    assert not (incoming / "sub").exists() or list((incoming / "sub").iterdir()) == []


def test_a_name_that_is_not_utf8_or_holds_a_newline_is_refused_escaped_not_fatal(workspace: Workspace,
                                                                                 incoming: Path) -> None:  # fmt: skip
    """Such a name cannot be logged or stored as it is (a surrogate fails every UTF-8 writer, a
    newline forges a log line): it is refused, shown escaped, and the run takes the other files."""
    _tsv(incoming / "a-good.tsv", [("g1", "A good passage.", "Good")])
    _tsv(Path(os.fsdecode(bytes(incoming) + b"/b-latin1-\xe9t\xe9.tsv")), [("l1", "Latin-1 name.", "L")])
    _tsv(incoming / "c-new\nline.tsv", [("n1", "A newline in its name.", "N")])
    (incoming / "d-tab\t.tsv.part").write_text(HEADER, encoding="utf-8")  # (checked before the temporary name)
    report = _run(workspace, incoming)
    assert report.added == ["a-good.tsv"] and _ids(workspace) == ["g1"], report
    assert sorted(report.refused) == ["b-latin1-\\xe9t\\xe9.tsv", "c-new\\nline.tsv", "d-tab\\t.tsv.part"], report
    assert all("not UTF-8 or holds a control character" in why for why in report.refused.values())
    text = look_at(incoming, settle_seconds=SETTLE).describe() + report.summary() + json.dumps(report.as_dict())
    text.encode("utf-8")  # (strict: no surrogate left)
    assert "\n" not in text and "\t" not in text


def test_files_of_one_run_must_not_clash_with_each_other(workspace: Workspace, incoming: Path) -> None:
    _tsv(incoming / "a.tsv", [("x1", "first", "A")])
    _tsv(incoming / "b.tsv", [("x1", f"{SECRET} again", "B")])
    with pytest.raises(MalformedFilesError, match=r"b\.tsv: passage ids already in the workspace") as refused:
        _run(workspace, incoming)
    assert "x1" not in str(refused.value) and SECRET not in str(refused.value)
    assert workspace.rows("passages") == 0
    assert _run(workspace, incoming).added == ["a.tsv"]


def test_a_changed_file_replaces_its_rows_and_an_unchanged_one_is_a_no_op(workspace: Workspace, incoming: Path) -> None:
    _tsv(incoming / "a.tsv", [("a1", "one", "A"), ("a2", "two", "A")])
    _tsv(incoming / "b.tsv", [("b1", "bee", "B")])
    assert _run(workspace, incoming).added == ["a.tsv", "b.tsv"]
    _tsv(incoming / "a.tsv", [("a1", "one, corrected", "A"), ("a3", "three", "A")])
    report = _run(workspace, incoming)
    assert (report.added, report.replaced, report.unchanged) == ([], ["a.tsv"], ["b.tsv"]), report
    assert report.passages["a.tsv"]["replaced"] == 2 and report.passages["a.tsv"]["passages"] == 2
    assert _ids(workspace) == ["a1", "a3", "b1"]
    assert _run(workspace, incoming).unchanged == ["a.tsv", "b.tsv"]


def test_a_file_that_changes_while_it_is_read_is_left_for_later(workspace: Workspace, incoming: Path) -> None:
    path = _tsv(incoming / "a.tsv", [("a1", "one", "A")])
    found = look_at(incoming, settle_seconds=SETTLE)
    _tsv(path, [("a1", "one", "A"), ("a2", "two", "A")])  # rewritten after it was looked at
    report = ingest_together(workspace, found)
    assert report.added == [] and "changed after it was looked at" in report.left["a.tsv"], report
    assert workspace.rows("passages") == 0


async def _prefect_logs_of(workspace: Path) -> str:
    """Every log line the Prefect server holds of the `reindex` runs on `workspace`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    async with get_client() as client:
        runs = await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["reindex"])),
                                           sort=FlowRunSort.START_TIME_DESC, limit=50, offset=0)  # fmt: skip
        lines = []
        for run in runs:
            if run.parameters.get("workspace") == str(workspace):
                response = await client._client.post("/logs/filter", json={
                    "logs": {"flow_run_id": {"any_": [str(run.id)]}}, "limit": 200, "offset": 0})  # fmt: skip
                response.raise_for_status()
                lines += [entry["message"] for entry in response.json()]
        return "\n".join(lines)


def test_a_refused_run_leaks_nothing_to_the_terminal_the_log_file_or_prefect(cli, tmp_path: Path, secret: Path) -> None:
    import asyncio

    from tests.conftest import _drain_prefect_workers

    ws = Workspace.resolve(tmp_path / "ws").root  # `odqa init`, or an earlier verb, made it a workspace
    folder = ws / "incoming"
    folder.mkdir(parents=True)
    (folder / "link.tsv").symlink_to(secret)
    (folder / "shadow.tsv").write_text(f"root:{SECRET}:19000:0:99999:7:::\n", encoding="utf-8")
    result = cli("--workspace", str(ws), "reindex", "--no-dense", "--settle-seconds", "0", ok=False)
    assert result.exit_code != 0 and f"{folder / 'shadow.tsv'}:1: expected the header" in result.output, result.output
    log_file = (ws / "logs" / "odqa.log").read_text(encoding="utf-8")
    assert "refused: link.tsv (a symbolic link" in log_file, log_file
    _drain_prefect_workers()
    prefect_logs = asyncio.run(_prefect_logs_of(ws))
    assert "shadow.tsv:1: expected the header" in prefect_logs, prefect_logs
    assert SECRET not in result.output + log_file + prefect_logs
    assert Workspace.resolve(ws).rows("passages") == 0


def test_a_dump_and_a_passages_file_are_committed_together_or_not_at_all(workspace: Workspace, tmp_path: Path) -> None:
    from odqa.flows.compositions.incoming import given
    from odqa.flows.plumbing.sample_data import SAMPLE_DUMP

    bad = tmp_path / "delta.tsv"
    bad.write_text(f"{HEADER}d1\tfine\tFine\nd2\t{SECRET} no title\n", encoding="utf-8")
    with pytest.raises(MalformedFilesError, match=r"delta\.tsv:3: expected 3 tab-separated fields") as refused:
        ingest_together(workspace, given(str(SAMPLE_DUMP), str(bad), "dpr-tsv"))
    assert SECRET not in str(refused.value) and bad.exists()  # a file given by name is never moved
    assert {table: workspace.rows(table) for table in ("articles", "passages")} == {"articles": 0, "passages": 0}
    _tsv(bad, [("d1", "fine", "Fine"), ("d2", "now with a title", "Title")])
    report = ingest_together(workspace, given(str(SAMPLE_DUMP), str(bad), "dpr-tsv"))
    assert report.added == [SAMPLE_DUMP.name, "delta.tsv"] and report.dump is not None, report
    assert workspace.rows("passages") == 152 and workspace.rows("articles") > 0
    again = ingest_together(workspace, given(str(SAMPLE_DUMP), str(bad), "dpr-tsv"))
    assert again.unchanged == [SAMPLE_DUMP.name, "delta.tsv"] and workspace.rows("passages") == 152


def test_transactions_committed_together_switch_at_once_or_move_nothing(workspace: Workspace) -> None:
    from odqa.storage.tables import ConcurrentUpdateError, commit_together

    def seed(source: str) -> None:
        with workspace.transaction(f"seed-{source}") as tx:
            tx.write("passages", [{"passage_id": source, "title": "T", "text": "t", "position": 0}], source=source)

    seed("old")
    first = workspace.transaction("first", fingerprint="f1")
    first.write("passages", [{"passage_id": "n1", "title": "T", "text": "t", "position": 0}], source="first")
    second = workspace.transaction("second", fingerprint="f2")
    second.rewrite("passages", lambda table: table, select=lambda entry: entry.source == "old")
    with workspace.transaction("another-writer") as other:  # replaces the part `second` rewrote meanwhile
        other.replace_source("passages", "old")
    before = workspace.snapshot()
    with pytest.raises(ConcurrentUpdateError):
        commit_together([first, second])
    assert workspace.snapshot() == before and first.staged_files("passages")[0].exists()
    first.abort()
    second.abort()
    third, fourth = workspace.transaction("third", fingerprint="f3"), workspace.transaction("fourth", fingerprint="f4")
    third.write("passages", [{"passage_id": "n3", "title": "T", "text": "t", "position": 0}], source="third")
    fourth.write("passages", [{"passage_id": "n4", "title": "T", "text": "t", "position": 0}], source="fourth")
    committed = commit_together([third, fourth])
    assert committed.version == before.version + 1 and _ids(workspace) == ["n3", "n4"]
    assert {committed.stages[s].fingerprint for s in ("third", "fourth")} == {"f3", "f4"}


def _import_lock_holder(root: Path, seconds: float) -> subprocess.Popen:
    """Another process holding the passages import lock (a long `odqa import passages`) for `seconds`."""
    script = ("import sys, time; from pathlib import Path; from odqa.storage.locks import writer_lock\n"
              "with writer_lock(Path(sys.argv[1]), 'table:passages:import', 'the passages table (import of big.tsv)'):\n"
              "    print('held', flush=True); time.sleep(float(sys.argv[2]))")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", script, str(root), str(seconds)], stdout=subprocess.PIPE,
                            text=True, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_run_meeting_a_long_import_goes_on_with_nothing_to_take_and_waits_with_files(workspace: Workspace,
                                                                                      incoming: Path) -> None:  # fmt: skip
    holder = _import_lock_holder(workspace.root, 3.0)
    try:
        report = ingest_together(workspace, look_at(incoming, settle_seconds=SETTLE))  # nothing to take: no lock
        assert report.summary() and workspace.rows("passages") == 0
        _tsv(incoming / "a.tsv", [("a1", "alpha", "A")])
        with pytest.raises(WriterBusy, match=r"is being written by pid \d+ on host"):
            ingest_together(workspace, look_at(incoming, settle_seconds=SETTLE))
        started = time.monotonic()
        ingest_together(workspace, look_at(incoming, settle_seconds=SETTLE), wait_s=60.0)
        assert time.monotonic() - started > 0.5  # it waited for the import to finish, then took the file
    finally:
        holder.kill()
        holder.wait()
    assert _ids(workspace) == ["a1"]
