"""Lines meant for the person at the terminal, from inside flows (a stage finished, an index is
being built because a verb needs it).

The `odqa` command line sends Prefect's own records (flow run created, task finished, ...) to a
log file and keeps the terminal for progress and summaries. A flow that wants a line to reach the
terminal too marks its record with ``odqa_console``: the CLI's terminal handler prints exactly the
marked records (and progress records), while the record itself still goes where every record of
the run goes — the flow run's logs on the Prefect server (the UI's log tab) and the log file.
One record, so nothing is shown twice, with or without ``-v``.
"""

from __future__ import annotations

import logging

CONSOLE_MARK = "odqa_console"


def tell(message: str, *args: object) -> None:
    """Log ``message`` (%-style ``args``) for the run's logs and mark it for the terminal."""
    from .runtime import stage_logger

    stage_logger().info(message, *args, extra={CONSOLE_MARK: True})


def is_console_record(record: logging.LogRecord) -> bool:
    """Whether a record was marked by :func:`tell`."""
    return bool(getattr(record, CONSOLE_MARK, False))


class LogFileHandler(logging.FileHandler):
    """An appending, UTF-8 log file whose folder is created on the first record (so a command
    that logs nothing leaves nothing behind). Also named by flows/cli/prefect-logging.yml, so
    processes the CLI starts (Prefect's temporary server, process pools) write to the same file.
    Created under the process's umask (owner-only by default), and a log an older odqa created
    wider is tightened to it when opened (`flows.backend.file_modes`)."""

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = "utf-8", delay: bool = True) -> None:
        super().__init__(filename, mode=mode, encoding=encoding, delay=delay)

    def _open(self):  # noqa: ANN202 (logging.FileHandler's signature)
        from pathlib import Path

        from ..backend.file_modes import tighten

        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        stream = super()._open()
        tighten(self.baseFilename)
        return stream


class RunFormatter(logging.Formatter):
    """``time | pid | level | where - message``, where a run record names its flow or task run
    (as Prefect's own formatter does) and any other record its logger."""

    def __init__(self, with_pid: bool = True, datefmt: str | None = None) -> None:
        pid = "%(process)d | " if with_pid else ""
        super().__init__(f"%(asctime)s | {pid}%(levelname)-7s | %(where)s - %(message)s", datefmt=datefmt)

    def format(self, record: logging.LogRecord) -> str:
        task_run = getattr(record, "task_run_name", None)
        flow_run = getattr(record, "flow_run_name", None)
        record.where = (f"Task run {task_run!r}" if task_run else f"Flow run {flow_run!r}" if flow_run
                        else record.name)  # fmt: skip
        return super().format(record)
