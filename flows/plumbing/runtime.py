"""Small helpers shared by the flows: logging that works inside and outside a flow run, and the
routing of ``odqa.*`` records (progress above all) into the flow run's logs in the Prefect API.

Prefect sends only its own run loggers to the API. The progress records of long loops come
from ``pipelines``/``models`` code that must not import Prefect, on the ``odqa.progress``
logger, sometimes from threads that lack Prefect's run context (a context variable). So the
flows attach one :class:`FlowRunLogHandler` to the ``odqa`` logger: it links a record to the
run found in the emitting thread's context, else to the innermost flow run that entered
:func:`flow_run_logs` in this process, and hands it to Prefect's batched API log worker, the
path Prefect's own run loggers take. That is what the UI's log tab of a running ``train`` or
``encode`` deployment shows. Records emitted outside any flow run are not sent. Child processes
without Prefect context (torchrun ranks) get the run id and API address in their environment
(:func:`run_log_env`) and adopt the run with :func:`adopt_flow_run_from_env`.

Prefect's ``PREFECT_LOGGING_EXTRA_LOGGERS`` is not enough here: it needs the setting before
Prefect configures logging, and its handler drops (with a warning) every record of a thread
without run context.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from prefect.logging.handlers import APILogHandler

from .prefect_fixes import prompt_heartbeat_shutdown, share_tls_context

# Every flow module imports this one: their clients share one TLS context and their flow runs end
# without waiting on a sleeping heartbeat thread (prefect_fixes).
share_tls_context()
prompt_heartbeat_shutdown()

ROUTED_LOGGER = "odqa"
FLOW_RUN_ENV = "ODQA_FLOW_RUN_ID"

_active_runs: list[uuid.UUID] = []
_active_lock = threading.Lock()


def stage_logger() -> logging.Logger | logging.LoggerAdapter:
    """Prefect's run logger inside a flow/task run, a plain logger otherwise (plain calls, tests)."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("odqa")


def _context_run_ids() -> tuple[uuid.UUID | None, uuid.UUID | None]:
    """(flow run id, task run id) of the calling thread's Prefect run context, if any."""
    from prefect.context import FlowRunContext, TaskRunContext

    task_context = TaskRunContext.get()
    if task_context is not None and task_context.task_run is not None:
        return task_context.task_run.flow_run_id, task_context.task_run.id
    flow_context = FlowRunContext.get()
    if flow_context is not None and flow_context.flow_run is not None:
        return flow_context.flow_run.id, None
    return None, None


class FlowRunLogHandler(APILogHandler):
    """Prefect's API log handler for records of non-Prefect loggers, with the run they belong to
    taken from the thread's context or, failing that, from :func:`flow_run_logs`."""

    def emit(self, record: logging.LogRecord) -> None:
        if not getattr(record, "flow_run_id", None):
            flow_run_id, task_run_id = _context_run_ids()
            flow_run_id = flow_run_id or _current_flow_run()
            if flow_run_id is None:
                return  # not part of a flow run: nowhere to send it
            record.flow_run_id = flow_run_id
            if task_run_id is not None and not getattr(record, "task_run_id", None):
                record.task_run_id = task_run_id
        super().emit(record)


def route_to_run_logs(name: str = ROUTED_LOGGER) -> None:
    """Attach the :class:`FlowRunLogHandler` to logger ``name`` (once per process)."""
    from prefect.settings import PREFECT_LOGGING_EXTRA_LOGGERS

    if name in PREFECT_LOGGING_EXTRA_LOGGERS.value():
        return  # the user already sends it through Prefect's own mechanism
    logger = logging.getLogger(name)
    if not any(isinstance(h, FlowRunLogHandler) for h in logger.handlers):
        logger.addHandler(FlowRunLogHandler())


@contextmanager
def flow_run_logs() -> Iterator[uuid.UUID | None]:
    """Inside a flow: ``odqa.*`` records of this process, from any thread, go to this flow run's
    logs until the block ends (nested flows: the innermost wins). Yields the flow run id."""
    flow_run_id, _ = _context_run_ids()
    route_to_run_logs()
    if flow_run_id is None:
        yield None
        return
    with _active_lock:
        _active_runs.append(flow_run_id)
    try:
        yield flow_run_id
    finally:
        with _active_lock:
            _active_runs.remove(flow_run_id)


def _current_flow_run() -> uuid.UUID | None:
    flow_run_id, _ = _context_run_ids()
    if flow_run_id is None:
        with _active_lock:
            flow_run_id = _active_runs[-1] if _active_runs else None
    return flow_run_id


def run_log_env() -> dict[str, str]:
    """Environment entries for a child process whose ``odqa.*`` records belong to the current
    flow run: its id and the API it reports to (also a temporary server's). Empty outside a run."""
    flow_run_id = _current_flow_run()
    if flow_run_id is None:
        return {}
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        api_url = str(client.api_url)
    return {FLOW_RUN_ENV: str(flow_run_id), "PREFECT_API_URL": api_url}


def adopt_flow_run_from_env() -> uuid.UUID | None:
    """In a child started with :func:`run_log_env`: send this process's ``odqa.*`` records to the
    parent's flow run (Prefect drains its log queue when the process exits)."""
    raw = os.environ.get(FLOW_RUN_ENV)
    if not raw:
        return None
    flow_run_id = uuid.UUID(raw)
    route_to_run_logs()
    with _active_lock:
        _active_runs.append(flow_run_id)
    return flow_run_id


route_to_run_logs()
