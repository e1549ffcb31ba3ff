"""Small helpers shared by the flows (logging that works inside and outside a flow run)."""

from __future__ import annotations

import logging


def stage_logger() -> logging.Logger | logging.LoggerAdapter:
    """Prefect's run logger inside a flow/task run, a plain logger otherwise (plain calls, tests)."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("odqa")
