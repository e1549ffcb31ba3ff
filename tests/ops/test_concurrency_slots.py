"""The machine's `gpu` slots: a task waiting for one says who holds it (pid, host, task) and how
long it waited; a killed holder's slot is free at once; the slot count fits the machine."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import odqa.flows.plumbing.concurrency_slots as slots_module
from odqa.flows.plumbing.concurrency_slots import (
    CORES_PER_CPU_SLOT,
    SLOT_DIR_ENV,
    SLOTS_ENV,
    gpu_slot,
    gpu_slots,
    holders,
)

HOLDER = """
import sys, time
from odqa.flows.plumbing.concurrency_slots import gpu_slot
with gpu_slot("train held-model"):
    print("holding", flush=True)
    time.sleep(120)
"""


def test_a_killed_holder_frees_its_slot_at_once_and_the_waiter_says_who_held_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(SLOTS_ENV, "1")
    monkeypatch.setenv(SLOT_DIR_ENV, str(tmp_path / "slots"))
    monkeypatch.setattr(slots_module, "GRACE_S", 0.5)
    import prefect.logging  # noqa: F401 (imported by every flow process; not timed here)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).parents[2])  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "holding"
        assert holders(tmp_path / "slots")[0].startswith(f"train held-model (pid {holder.pid} on ")
        got: list[float] = []

        def wait_for_slot() -> None:
            with gpu_slot("encode waiting-model"):
                got.append(time.monotonic())

        with caplog.at_level(logging.INFO, logger="odqa.slots"):
            waiter = threading.Thread(target=wait_for_slot)
            waiter.start()
            time.sleep(1.5)
            assert not got  # the slot is taken
            killed = time.monotonic()
            os.kill(holder.pid, signal.SIGKILL)
            waiter.join(timeout=10)
        assert got and got[0] - killed < 1.0, "the dead holder's slot was not free at once"
    finally:
        holder.kill()
        holder.wait()
    waiting = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert waiting and "for one of this machine's 1 gpu slot(s)" in waiting[0], waiting
    assert f"held by train held-model (pid {holder.pid} on " in waiting[0]
    assert "encode waiting-model starts when one frees" in waiting[0]
    assert any(r.getMessage().startswith("got gpu slot 0 after ") for r in caplog.records)
    assert holders(tmp_path / "slots") == []  # released on leaving the block


def test_gpu_slots_fit_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLOTS_ENV, "3")
    assert gpu_slots() == (3, f"${SLOTS_ENV}")
    monkeypatch.delenv(SLOTS_ENV)
    import torch

    slots, why = gpu_slots()
    if torch.cuda.device_count():
        assert slots == torch.cuda.device_count() and "per GPU" in why
    else:
        assert slots == max(1, (os.cpu_count() or 1) // CORES_PER_CPU_SLOT) and why.startswith("CPU only")
