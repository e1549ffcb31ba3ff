"""`--runner` / `--runner-workers` / `--dask-address`: where a verb's data-parallel tasks run.

Shared by every verb whose flow maps work over a Prefect task runner (ingest, encode, mine), so
the same three options mean the same thing everywhere. Without any of them a flow keeps its
default on-machine path; `$ODQA_DASK_ADDRESS` still routes work to a cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # imported when a verb runs: flows.plumbing.task_runners imports Prefect
    from ..plumbing.task_runners import RunnerSettings

F = TypeVar("F", bound=Callable[..., Any])


def runner_options(command: F) -> F:
    """Add the three runner options to a click command (as `runner`, `runner_workers`, `dask_address`)."""
    command = click.option("--dask-address", default=None, metavar="TCP://HOST:PORT",
                           help="Run the mapped tasks on this Dask scheduler (default: $ODQA_DASK_ADDRESS).")(command)  # fmt: skip
    command = click.option("--runner-workers", type=click.IntRange(min=1), default=None,
                           help="Workers of a local task runner (default: CPU count).")(command)  # fmt: skip
    return click.option("--runner", type=click.Choice(["threads", "processes", "dask"]), default=None,
                        help="Map the data-parallel tasks over this Prefect task runner.")(command)  # fmt: skip


def runner_settings(runner: str | None, runner_workers: int | None, dask_address: str | None) -> RunnerSettings | None:
    """The settings the options name, or None when none was given (the flow's default path)."""
    if runner is None and runner_workers is None and dask_address is None:
        return None
    from ..plumbing.task_runners import RunnerSettings

    return RunnerSettings(kind=runner or ("dask" if dask_address else "threads"), workers=runner_workers,
                          dask_address=dask_address)  # fmt: skip
