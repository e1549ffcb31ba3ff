"""The `release-rollback` deployment: `odqa release rollback` from the Prefect UI.

The weekly re-index runs from the UI's schedule, so the one who finds its release wrong (a broken
dump) is often there too. This flow serves a kept release again and holds what it replaced, as
the command does (`storage.release_rollback`); the command line calls that directly, without a
Prefect server, so a rollback never waits for one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefect import flow

from ...storage import Workspace
from ...storage.release_rollback import rollback
from ...storage.reports import Report
from ..plumbing.report_text import log_report


@dataclass
class RollbackReport(Report):
    release: str  # the new release, serving what `restored_from` served
    restored_from: str
    previous: str | None  # the release rolled back from
    held: str
    dropped: list[str] = field(default_factory=list)
    pruned_releases: list[str] = field(default_factory=list)


@flow(name="release-rollback")
def release_rollback_flow(workspace: str | None = None, to: str | None = None) -> RollbackReport:
    """Serve a kept release again (published anew, naming the one it restores); running services
    switch to it. What the current release serves is held: a re-index publishes those passages
    (or, for the same passages, those builds) again only after new passages or `odqa release
    unhold`. Refused, changing nothing, when its indexes or passages are gone or it would take
    from a running service the retriever it answers with.

    Args:
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        to: The kept release to serve again (its id, or a prefix only it has); empty: the newest
            one before the current one that serves other indexes and is not held.
    """
    from prefect.runtime import flow_run

    by = f"the release-rollback deployment (flow run {flow_run.get_name() or flow_run.get_id() or '?'})"
    done = rollback(Workspace.resolve(workspace), to or None, by=by)
    release = done.release
    assert release is not None and release.restored_from is not None and done.held is not None
    report = RollbackReport(release=release.release, restored_from=release.restored_from, previous=done.previous,
                            held=done.held, dropped=release.dropped, pruned_releases=done.pruned_releases)  # fmt: skip
    log_report(f"release rollback {release.release}", report)
    return report
