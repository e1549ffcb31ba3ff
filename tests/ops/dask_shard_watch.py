"""A Dask scheduler preload for tests (`dask scheduler --preload <this file>`).

Armed by a test (`arm`, through `Client.run_on_scheduler`), it records in the JSON file the test
names every task that finishes (its worker, when, how long it computed, the resources it asked
for), when each task is sent to a worker and when each client leaves. Armed with
``lose_after=N`` it loses a worker the way a user does: once the client has taken the N-th
finished task's result (the scheduler forgets the key), it SIGKILLs that task's worker process,
which is then mid-way through its next task. Only the scheduler runs it, so one clock times
every record.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin


class ShardWatch(SchedulerPlugin):
    """Records tasks and clients; kills the worker of the ``lose_after``-th finished task once
    its result is taken."""

    name = "odqa-shard-watch"

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.arm(None, None)

    def arm(self, record: Path | None, lose_after: int | None) -> None:
        """Start a fresh record in ``record`` (None: record nothing)."""
        self.record, self.lose_after = record, lose_after
        self.finished: list[dict[str, Any]] = []
        self.victim: tuple[str, str] | None = None  # (key, worker) of the lose_after-th finished task
        self.lost: dict[str, Any] | None = None
        self.assigned: list[float] = []  # when each task was sent to a worker
        self.clients_gone: list[tuple[str, float]] = []  # (client id, when it left)

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if self.record is None:
            return
        if finish == "processing":
            self.assigned.append(time.time())
        if start == "processing" and finish == "memory":
            computed = [
                s["stop"] - s["start"] for s in kwargs.get("startstops", ()) if s["action"] == "compute"
            ]
            self.finished.append({"key": str(key), "worker": kwargs["worker"], "at": time.time(),
                                  "compute": sum(computed), "asked": self.scheduler.tasks[key].resource_restrictions})  # fmt: skip
            if self.lose_after and len(self.finished) == self.lose_after:
                self.victim = (str(key), kwargs["worker"])
        elif (
            self.victim
            and self.lost is None
            and str(key) == self.victim[0]
            and finish in ("released", "forgotten")
        ):
            self._lose(self.victim[1])
        self._save()

    def remove_client(self, scheduler: Any, client: str) -> None:
        if self.record is not None:
            self.clients_gone.append((client, time.time()))
            self._save()

    def _lose(self, address: str) -> None:
        worker = self.scheduler.workers.get(address)
        if worker is None:
            return
        self.lost = {"worker": address, "pid": worker.pid, "at": time.time(),
                     "processing": sorted(str(t.key) for t in worker.processing)}  # fmt: skip
        os.kill(worker.pid, signal.SIGKILL)

    def _save(self) -> None:
        assert self.record is not None
        partial = self.record.with_suffix(".partial")
        partial.write_text(json.dumps({"finished": self.finished, "lost": self.lost, "assigned": self.assigned,
                                       "clients_gone": self.clients_gone}))  # fmt: skip
        partial.replace(self.record)


def arm(record: str, lose_after: int | None, dask_scheduler: Any) -> None:
    """Run on the scheduler (`Client.run_on_scheduler(arm, record, lose_after)`)."""
    dask_scheduler.plugins[ShardWatch.name].arm(Path(record), lose_after)


def dask_setup(scheduler: Any) -> None:
    """Dask's preload hook."""
    scheduler.add_plugin(ShardWatch(scheduler), name=ShardWatch.name)
