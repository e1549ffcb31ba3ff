"""The `gpu` slots of one machine: how many training/encoding tasks it runs at once, held as
locked files so that a dead holder's slot is free at once.

Training and in-process encoding use every core (or the GPU) of the machine they run on, so two
of them at once only share it and add memory. Each such task holds one of this machine's slots
(`gpu_slots`: one per GPU, else one per 4 cores) for its training or encoding loop only: what
comes before (finding out whether there is work at all: fingerprints, complete embeddings,
loading the examples or the model) runs without one, so a stage with nothing to do never waits
for another's work. A slot is a file in `slot_dir()` locked with `flock`: the kernel drops the
lock when its process ends, however it ends, so a killed training frees its slot at once (a
Prefect tag concurrency limit held it until its lease expired, 30-60 s later). The file names its
holder (verb, what it works on, workspace, pid, host, command, since when), and a task waiting
for a slot names them in its run's logs after `GRACE_S` (a warning, so the terminal of a CLI call
shows it too), again every `REPEAT_S`, and how long it waited once it got one.

The slots belong to the machine, not to a workspace or a Prefect server: two workspaces on one
machine share its devices. Tasks on a Dask cluster do not take them: there each worker declares
its capacity (`flows.plumbing.task_runners.ACCELERATOR`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...storage.locks import holder_text, this_command

SLOTS_ENV = "ODQA_GPU_SLOTS"
SLOT_DIR_ENV = "ODQA_SLOT_DIR"
CORES_PER_CPU_SLOT = 4
GRACE_S = 3.0
REPEAT_S = 60.0
POLL_S = 0.2


def gpu_slots() -> tuple[int, str]:
    """(concurrent `gpu` tasks this machine takes, why): ``$ODQA_GPU_SLOTS``, else one per
    GPU, else on a CPU-only machine one per 4 cores (at least one): a CPU training or encoding
    already uses every core, so more of them at once only share the cores and add memory."""
    if os.environ.get(SLOTS_ENV):
        return max(1, int(os.environ[SLOTS_ENV])), f"${SLOTS_ENV}"
    try:
        import torch

        devices = torch.cuda.device_count()
    except ImportError:
        devices = 0
    if devices:
        return devices, f"one per GPU, {devices} GPU(s)"
    cores = os.cpu_count() or 1
    return max(1, cores // CORES_PER_CPU_SLOT), f"CPU only: one per {CORES_PER_CPU_SLOT} cores, {cores} cores"


def slot_dir() -> Path:
    """Where this machine's slot files live: ``$ODQA_SLOT_DIR``, else one folder per user in the
    temporary directory (every odqa process of the user on this machine sees the same slots)."""
    return Path(os.environ.get(SLOT_DIR_ENV) or Path(tempfile.gettempdir()) / f"odqa-gpu-slots-{os.getuid()}")


def holder_line(owner: dict[str, Any]) -> str:
    """`train m in workspace /w (pid P on host H (odqa train ...) since 14:02:11 UTC, for N s)`
    from a slot file's record."""
    where = f" in workspace {owner['workspace']}" if owner.get("workspace") else ""
    # an odqa from before issue 40 (another checkout on the machine) wrote `since` and no command
    started = owner.get("started") or owner.get("since") or time.time()
    record = {**owner, "started": started, "command": owner.get("command") or "odqa"}
    return f"{owner.get('task', '?')}{where} ({holder_text(record)}, for {time.time() - started:.0f} s)"


def holders(folder: Path | None = None) -> list[str]:
    """Who holds the slots now (`holder_line`); a slot whose holder is gone is free (its lock
    went with its process) and is not listed."""
    folder = folder or slot_dir()
    found = []
    for path in sorted(folder.glob("gpu-*.lock")):
        with contextlib.suppress(OSError), path.open("r+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                continue  # nobody holds it
            except BlockingIOError:
                pass
            with contextlib.suppress(ValueError):
                found.append(holder_line(json.loads(handle.read() or "{}")))
    return found


def _try_slot(path: Path, task: str, workspace: Path | str | None) -> int | None:
    """The descriptor of ``path`` locked and stamped with this process as its holder, or None
    when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # not inherited by child processes
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    owner = {"task": task, "workspace": str(workspace) if workspace else None, "pid": os.getpid(),
             "host": socket.gethostname(), "command": this_command(), "started": time.time()}  # fmt: skip
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(owner).encode(), 0)
    return fd


def _run_logger() -> logging.Logger | logging.LoggerAdapter:
    """The task run's logger, else this module's (outside a run)."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("odqa.slots")


@contextlib.contextmanager
def gpu_slot(task: str, workspace: Path | str | None = None) -> Iterator[int]:
    """Hold one of this machine's `gpu` slots while the block runs (waiting for one, and saying
    who holds them, when all are taken); yields the slot's number. ``task`` is the verb and what
    it works on (`train m`, `encode m`), ``workspace`` the workspace it works for: what a waiting
    run is told about this holder. Wrap only the loop that uses the device."""
    slots, why = gpu_slots()
    folder = slot_dir()
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    report_at, announced = GRACE_S, False
    while True:
        for number in range(slots):
            fd = _try_slot(folder / f"gpu-{number}.lock", task, workspace)
            if fd is None:
                continue
            try:
                if announced:
                    _run_logger().info(f"got gpu slot {number} after {time.monotonic() - started:.0f} s")
                yield number
            finally:
                os.ftruncate(fd, 0)
                os.close(fd)  # closing drops the lock
            return
        waited = time.monotonic() - started
        if waited >= report_at:
            taken = ", ".join(holders(folder)) or "processes that are just ending"
            _run_logger().warning(f"waiting {waited:.0f} s for one of this machine's {slots} gpu slot(s) ({why}; "
                                  f"${SLOTS_ENV} sets another number), held by {taken}; {task} starts when one "
                                  "frees")  # fmt: skip
            report_at, announced = waited + REPEAT_S, True
        time.sleep(POLL_S)
