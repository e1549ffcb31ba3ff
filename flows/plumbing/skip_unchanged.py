"""The one "skip if unchanged" rule every stage follows.

A stage fingerprints what it reads (parameters, file hashes, table versions); when the workspace's
ledger says the stage last committed with exactly that fingerprint, the stage does nothing and
returns the report it recorded then, marked as a no-op.
"""

from __future__ import annotations

from typing import TypeVar

from ...storage import Workspace
from ...storage.reports import Report
from .runtime import stage_logger

R = TypeVar("R", bound=Report)


def finished_report(ws: Workspace, stage: str, fingerprint: str, report_type: type[R],
                    why: str = "inputs unchanged") -> R | None:  # fmt: skip
    """The stage's recorded report when it already ran on these inputs, else None."""
    record = ws.stage_record(stage)
    if record is None or record.fingerprint != fingerprint:
        return None
    report = report_type.from_ledger(record.report)
    if report is not None:
        stage_logger().info("%s: %s (no-op)", stage, why)
    return report
