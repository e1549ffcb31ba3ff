"""The machine's `gpu` slot is taken only around real work: a re-index with nothing to do
finishes while another workspace's process holds the only slot, and one that has passages to
encode waits, naming the holder (verb, workspace, pid, since when) on the terminal and in its
Prefect run's logs. The holder is a real second process that takes the slot, as a training in
another workspace does."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import odqa.flows.plumbing.concurrency_slots as slots_module
from odqa.flows.plumbing.concurrency_slots import SLOT_DIR_ENV, SLOTS_ENV, holders
from odqa.storage import Workspace
from tests.boundaries.release_builds import NEW_PASSAGES, passages_file, tiny_model
from tests.conftest import REPO_ROOT
from tests.ops.test_long_runs import flow_run_messages

HOLDER = """
import sys, time
from odqa.flows.plumbing.concurrency_slots import gpu_slot
with gpu_slot("train other-model", sys.argv[1]):
    print("holding", flush=True)
    time.sleep(600)
"""
NOOP_LIMIT_S = 60.0


def _end_once_waited_for(holder: subprocess.Popen, log: Path, limit_s: float = 300.0) -> None:
    """Kill `holder` once a run has logged that it waits for the slot it holds (however long a
    loaded machine takes to get there), or after `limit_s` (the test then fails on the missing line)."""

    def watch() -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and "held by train other-model" not in (
                log.read_text(errors="replace") if log.exists() else ""):  # fmt: skip
            time.sleep(0.2)
        holder.kill()

    threading.Thread(target=watch, daemon=True).start()


@pytest.fixture
def one_slot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This machine with one `gpu` slot, in a folder of the test's own; waiting is said at once."""
    folder = tmp_path / "slots"
    monkeypatch.setenv(SLOTS_ENV, "1")
    monkeypatch.setenv(SLOT_DIR_ENV, str(folder))
    monkeypatch.setattr(slots_module, "GRACE_S", 0.5)
    return folder


def _hold_slot(workspace: Path) -> subprocess.Popen:
    """A second process that takes the slot for another workspace and keeps it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(workspace)], stdout=subprocess.PIPE, text=True,
                              cwd=REPO_ROOT)  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    return holder


def test_a_noop_reindex_never_waits_for_the_slot_and_real_work_names_who_holds_it(
    prefect_harness: str, one_slot: Path, tmp_path: Path, cli
) -> None:
    from odqa.flows.compositions.reindex import reindex_flow

    ws = Workspace.resolve(tmp_path / "ws")
    model = tiny_model(tmp_path / "model", seed=0)
    first = reindex_flow(workspace=str(ws.root), passages=passages_file(tmp_path, "passages.tsv"), model=model,
                         bm25=False)  # fmt: skip
    assert not first.noop and first.figures["dense_vectors"] == ws.rows("passages")

    other = tmp_path / "other-ws"
    holder = _hold_slot(other)
    try:
        assert holders(one_slot)[0].startswith(f"train other-model in workspace {other} (pid {holder.pid} on host ")
        states: list = []
        again = threading.Thread(target=lambda: states.append(
            reindex_flow(workspace=str(ws.root), model=model, bm25=False, return_state=True)))
        started = time.monotonic()
        again.start()
        again.join(timeout=NOOP_LIMIT_S)
        assert not again.is_alive(), "the no-op re-index waited for the slot another workspace holds"
        assert time.monotonic() - started < NOOP_LIMIT_S
        state = states[0]
        assert state.is_completed() and state.result().noop
        messages = flow_run_messages(state.state_details.flow_run_id)
        assert not [m for m in messages if "gpu slot" in m], messages

        # New passages are real work: it waits for the slot, saying who holds it, until the holder ends.
        _end_once_waited_for(holder, ws.root / "logs" / "odqa.log")
        out = cli("-w", str(ws.root), "reindex", "--passages", passages_file(tmp_path, "new.tsv", NEW_PASSAGES),
                  "--model", model, "--no-bm25").output  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    named = f"held by train other-model in workspace {other} (pid {holder.pid} on host "
    waiting = [line for line in out.splitlines() if named in line]
    assert waiting and "since " in waiting[0] and " UTC, for " in waiting[0], out  # on the terminal
    logged = [m for m in flow_run_messages(_latest_reindex(ws.root)) if named in m]
    assert logged and "encode " in logged[0], "the run's logs do not say who holds the slot"


def _latest_reindex(workspace: Path):
    """The id of the newest `reindex` flow run of the workspace (the one the CLI just ran)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterStartTime,
    )
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:  # started runs only: a deployed schedule's runs have none
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["reindex"])),
                                     flow_run_filter=FlowRunFilter(start_time=FlowRunFilterStartTime(is_null_=False)),
                                     sort=FlowRunSort.START_TIME_DESC, limit=50)  # fmt: skip
    return next(r.id for r in runs if r.parameters.get("workspace") == str(workspace))


def test_a_slot_record_of_an_older_odqa_still_names_its_holder() -> None:
    """Slot files are shared by every odqa checkout of the machine's user; one written before the
    workspace and command were recorded is still read."""
    from odqa.flows.plumbing.concurrency_slots import holder_line

    since = time.time() - 95
    line = holder_line({"pid": 4711, "host": "gpu-box", "task": "train m1", "since": since})
    clock = time.strftime("%H:%M:%S", time.gmtime(since))
    assert line == f"train m1 (pid 4711 on host gpu-box (odqa) since {clock} UTC, for 95 s)"
