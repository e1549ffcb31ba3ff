"""What a CLI call shows on the terminal, and where everything else goes.

Default: the terminal gets the stage's progress (``odqa.progress`` records: tqdm bars drawn by
``pipelines.progress`` on a TTY, one-line records off it), lines flows mark for the user
(``flows.plumbing.console.tell``), warnings of our own code, and the command's summary. Every log record
— Prefect's "flow run created", "task finished", run reports — goes to
``<workspace>/logs/odqa.log`` (appended, timestamped, with the process id). ``-v`` prints those
records on the terminal as well.

Two places need telling, because Prefect configures logging in every process it imports into:

* this process: handlers on the root logger, installed before Prefect is imported; Prefect's
  ``setup_logging`` then leaves a root logger with user handlers alone (its ``console`` handler
  never gets attached), while ``prefect.flow_runs`` / ``prefect.task_runs`` keep their ``api``
  handler, so records still reach the server's run logs;
* child processes (Prefect's temporary server, process-pool task runners, torchrun): the
  environment points ``PREFECT_LOGGING_SETTINGS_PATH`` at ``prefect-logging.yml`` beside this
  module, Prefect's own configuration with the terminal handler swapped for the same log file.

Everything is undone when the command ends (``TerminalSession.close``), so in-process callers
(tests, notebooks) get their logging and environment back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

from ...pipelines.progress import LOGGER_NAME as PROGRESS_LOGGER
from ..plumbing.console import LogFileHandler, RunFormatter, is_console_record

LOG_DIR = "logs"
LOG_NAME = "odqa.log"
PREFECT_LOGGING_FILE = Path(__file__).with_name("prefect-logging.yml")
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
# Long-running services whose INFO records are what their operator watches (`odqa serve`:
# releases loaded, switched, freed, failed to load).
SERVICE_LOGGERS = ("odqa.serve",)
BACKLOG_TIMEOUT_S = 10.0  # the longest a command's end waits for Prefect's queued events and logs


def workspace_root(chosen: str | None) -> Path:
    """The workspace folder `storage.Workspace.resolve` would pick (`--workspace`, else
    `$ODQA_WORKSPACE`, else ./workspace), without importing storage (pyarrow, duckdb) or
    creating anything: `--help` and argument errors must stay fast."""
    return Path(chosen or os.environ.get("ODQA_WORKSPACE") or "workspace").expanduser().resolve()


def for_terminal(record: logging.LogRecord) -> bool:
    """Progress, lines marked for the user, a service's own records, and warnings (our own, or
    of a flow/task run)."""
    if record.name == PROGRESS_LOGGER or record.name.startswith(PROGRESS_LOGGER + ".") or is_console_record(record):
        return True
    if record.levelno >= logging.WARNING and (record.name == "odqa" or record.name.startswith("odqa.")):
        return True
    if record.name in SERVICE_LOGGERS:
        return True
    return record.levelno == logging.WARNING and record.name in RUN_LOGGERS


def is_finished_progress(record: logging.LogRecord) -> bool:
    """The closing record of a loop that completed (``... | done | ...``, see pipelines.progress)."""
    return record.name.startswith(PROGRESS_LOGGER) and "done" in record.getMessage().split(" | ")


class TerminalHandler(logging.Handler):
    """Writes to the *current* ``sys.stderr`` (click's test runner swaps it per call).

    ``stage_lines(gap)`` is for commands that print their own line per finished stage (`odqa
    demo`): the closing record of each completed loop is dropped (dozens of tiny loops would
    each add a line) and records of running loops are shown at most once per ``gap`` seconds,
    so the terminal gets a bounded number of lines however long the stages take. The log file
    and the run logs still get every record."""

    def __init__(self, everything: bool) -> None:
        super().__init__(level=logging.INFO)
        self.everything = everything
        self.progress_gap: float | None = None
        self.last_progress = float("-inf")
        self.last_record: logging.LogRecord | None = None

    def stage_lines(self, gap: float) -> None:
        self.progress_gap = gap

    def filter(self, record: logging.LogRecord) -> bool:
        # Attached to the root logger and to the progress logger (whose records then reach it
        # twice, or once if the progress logger does not propagate): show each record once.
        if record is self.last_record:
            return False
        self.last_record = record
        if self.progress_gap is not None and record.name.startswith(PROGRESS_LOGGER):
            if is_finished_progress(record) or record.created - self.last_progress < self.progress_gap:
                return False
            self.last_progress = record.created
        return (self.everything or for_terminal(record)) and super().filter(record)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            if not self.everything and record.levelno >= logging.WARNING:
                message = f"{record.levelname.lower()}: {message}"
            click.echo(message, err=True)
        except Exception:  # noqa: BLE001 (logging's contract: report, never raise)
            self.handleError(record)


@dataclass
class TerminalSession:
    """The handlers and environment one CLI call installed, to undo them at its end."""

    log_path: Path
    verbose: bool
    terminal: TerminalHandler | None = None
    handlers: list[tuple[logging.Logger, logging.Handler]] = field(default_factory=list)
    detached: list[logging.Handler] = field(default_factory=list)
    saved_env: dict[str, str | None] = field(default_factory=dict)
    saved_levels: dict[str, int] = field(default_factory=dict)
    captured_warnings: bool = False

    def set_env(self, name: str, value: str) -> None:
        self.saved_env.setdefault(name, os.environ.get(name))
        os.environ[name] = value

    def close(self) -> None:
        _send_prefect_backlog(BACKLOG_TIMEOUT_S)
        root = logging.getLogger()
        for logger, handler in self.handlers:
            logger.removeHandler(handler)
            handler.close()
        self.handlers.clear()
        for handler in self.detached:
            root.addHandler(handler)
        self.detached.clear()
        for name, value in self.saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self.saved_env.clear()
        for name, level in self.saved_levels.items():
            logging.getLogger(name).setLevel(level)
        self.saved_levels.clear()
        if self.captured_warnings:
            logging.captureWarnings(False)
            self.captured_warnings = False

    def log_written(self) -> bool:
        return self.log_path.is_file() and self.log_path.stat().st_size > 0


def _send_prefect_backlog(timeout_s: float) -> None:
    """Send what Prefect still queues for its server (the events of this call's flow runs, their
    log records) while this call's handlers are attached. Left to the interpreter's exit, a
    backlog makes Prefect warn "Still processing items: N items remaining..." through logging's
    last resort, onto a terminal this module keeps for the command's own lines. Not from inside a
    running event loop (an async caller drains its own)."""
    if "prefect.events.worker" not in sys.modules:
        return
    try:
        asyncio.get_running_loop()
        return
    except RuntimeError:
        pass
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=timeout_s, at_exit=False)  # every queue service's instances


def open_session(workspace: Path, verbose: bool) -> TerminalSession:
    """Route this call's logging: see the module docstring."""
    session = TerminalSession(log_path=workspace / LOG_DIR / LOG_NAME, verbose=verbose)
    if not os.environ.get("PREFECT_LOGGING_SETTINGS_PATH"):
        session.set_env("PREFECT_LOGGING_SETTINGS_PATH", str(PREFECT_LOGGING_FILE))
    session.set_env("PREFECT_LOGGING_HANDLERS_LOGFILE_FILENAME", str(session.log_path))
    if verbose:
        session.set_env("PREFECT_LOGGING_ROOT_HANDLERS", "logfile,console")

    log_file = LogFileHandler(str(session.log_path))
    log_file.setFormatter(RunFormatter())
    terminal = session.terminal = TerminalHandler(everything=verbose)
    terminal.setFormatter(RunFormatter(with_pid=False, datefmt="%H:%M:%S") if verbose else logging.Formatter("%(message)s"))
    root = logging.getLogger()
    for logger, handler in ((root, log_file), (root, terminal), (logging.getLogger(PROGRESS_LOGGER), terminal)):
        logger.addHandler(handler)
        session.handlers.append((logger, handler))
    # Third-party warnings (numba, transformers, ...) are records too: in the log file, and on
    # the terminal only with -v.
    logging.captureWarnings(True)
    session.captured_warnings = True
    odqa = logging.getLogger("odqa")
    session.saved_levels["odqa"] = odqa.level
    if odqa.getEffectiveLevel() > logging.INFO:
        odqa.setLevel(logging.INFO)
    if "prefect" in sys.modules:
        _quiet_prefect_console(session)
    return session


def _quiet_prefect_console(session: TerminalSession) -> None:
    """Prefect was imported before this call (an in-process caller): its console handler on the
    root logger already exists; it is detached for the call (our terminal handler shows what it
    should, everything with -v) and put back after."""
    from prefect.logging.handlers import PrefectConsoleHandler

    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, PrefectConsoleHandler)]:
        root.removeHandler(handler)
        session.detached.append(handler)

