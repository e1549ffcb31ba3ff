"""A Dask scheduler preload for tests (`dask scheduler --preload <this file>`): it records every
task that finishes (its worker, when, how long it computed, the resources it asked for), when
each task is sent to a worker and when each client leaves, in the JSON file `$ODQA_TEST_WATCH_RECORD` names. With `$ODQA_TEST_LOSE_AFTER=N` it loses a worker the
way a user does: once the client has taken the N-th finished task's result (the scheduler
forgets the key), it SIGKILLs that task's worker process, which is then mid-way through its next
task. Only the scheduler runs it, so the clock is one for every record."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

RECORD_ENV = "ODQA_TEST_WATCH_RECORD"
LOSE_ENV = "ODQA_TEST_LOSE_AFTER"


class ShardWatch(SchedulerPlugin):
    """Records finished tasks; kills the worker of the ``lose_after``-th once its result is taken."""

    name = "odqa-shard-watch"

    def __init__(self, scheduler: Any, record: Path, lose_after: int | None) -> None:
        self.scheduler, self.record, self.lose_after = scheduler, record, lose_after
        self.finished: list[dict[str, Any]] = []
        self.victim: tuple[str, str] | None = None  # (key, worker) of the lose_after-th finished task
        self.lost: dict[str, Any] | None = None
        self.assigned: list[float] = []  # when each task was sent to a worker
        self.clients_gone: list[tuple[str, float]] = []  # (client id, when it left)

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "processing":
            self.assigned.append(time.time())
            self._save()
        if start == "processing" and finish == "memory":
            computed = [
                s["stop"] - s["start"] for s in kwargs.get("startstops", ()) if s["action"] == "compute"
            ]
            self.finished.append({"key": str(key), "worker": kwargs["worker"], "at": time.time(),
                                  "compute": sum(computed), "asked": self.scheduler.tasks[key].resource_restrictions})  # fmt: skip
            if self.lose_after and len(self.finished) == self.lose_after:
                self.victim = (str(key), kwargs["worker"])
            self._save()
        elif (
            self.victim
            and self.lost is None
            and str(key) == self.victim[0]
            and finish in ("released", "forgotten")
        ):
            self._lose(self.victim[1])

    def remove_client(self, scheduler: Any, client: str) -> None:
        self.clients_gone.append((client, time.time()))
        self._save()

    def _lose(self, address: str) -> None:
        worker = self.scheduler.workers.get(address)
        if worker is None:
            return
        self.lost = {"worker": address, "pid": worker.pid, "at": time.time(),
                     "processing": sorted(str(t.key) for t in worker.processing)}  # fmt: skip
        os.kill(worker.pid, signal.SIGKILL)
        self._save()

    def _save(self) -> None:
        partial = self.record.with_suffix(".partial")
        partial.write_text(
            json.dumps(
                {
                    "finished": self.finished,
                    "lost": self.lost,
                    "assigned": self.assigned,
                    "clients_gone": self.clients_gone,
                }
            )
        )
        partial.replace(self.record)


def dask_setup(scheduler: Any) -> None:
    """Dask's preload hook."""
    lose_after = int(os.environ.get(LOSE_ENV) or 0) or None
    scheduler.add_plugin(ShardWatch(scheduler, Path(os.environ[RECORD_ENV]), lose_after))
