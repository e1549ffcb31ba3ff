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


def current_fingerprint(ws: Workspace, stage: str, now: str, earlier: str) -> str:
    """`earlier` where the stage's ledger record was taken with it (a fingerprint from before a
    default changed, `Settings.earlier_defaults`), else `now`: an unchanged command on work done
    before the change stays a no-op (or a resumption) instead of starting over."""
    record = ws.stage_record(stage)
    if earlier != now and record is not None and record.fingerprint == earlier:
        stage_logger().info("%s: recorded with the defaults of its time; still current", stage)
        return earlier
    return now
