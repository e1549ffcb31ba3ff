"""`odqa bm25 index`: the Lucene BM25 index of the passages (title + text), then published.

The index of a passages version lives at `indexes/bm25/<version>` (`storage.index_layout`); a
build for unchanged passages is a no-op. The Java preflight runs first, so a missing or too old
JDK fails in a second with install instructions instead of after minutes of other work.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from prefect import flow, task

from ...pipelines.retrieval.bm25 import StaleIndexError, build_bm25_index, open_bm25_index
from ...pipelines.retrieval.java import ensure_java
from ...storage import Workspace
from ...storage.index_layout import IndexLayout
from ...storage.locks import writer_lock
from ...storage.passages import passage_records, require_passages
from ...storage.releases import ServingChange
from ...storage.reports import Report
from ..plumbing.bounds import AtLeastOne
from ..plumbing.publish import publish_indexes
from ..plumbing.report_text import log_report
from ..plumbing.runtime import stage_logger

BUILD_WAIT_S = 6 * 3600.0  # how long a second build of the same index waits for the first


@dataclass
class Bm25IndexReport(Report):
    path: str
    documents: int
    snapshot: str
    skipped_empty: int = 0
    skipped_bad_ids: int = 0  # passages whose ids break the passage-id rule (let in by an older odqa)
    build_seconds: float = 0.0
    release: str | None = None

    def as_figures(self) -> dict[str, Any]:
        """The figures, without `skipped_bad_ids` when every id was fine (the usual case)."""
        figures = super().as_figures()
        if not self.skipped_bad_ids:
            figures.pop("skipped_bad_ids", None)
        return figures


@task(name="java-preflight")
def java_preflight_task() -> str:
    """JDK 21+ with jdk.incubator.vector, or JavaMissingError saying what to install; its version."""
    return ensure_java().version


@task(name="bm25-build-index")
def build_bm25_task(workspace: str, passages_version: str, threads: int) -> Bm25IndexReport:
    ws = Workspace.resolve(workspace)
    path = IndexLayout.of(ws).bm25(passages_version)
    with ws.reading_version("passages", passages_version, what="bm25 build") as snapshot:  # that version only
        info = build_bm25_index(passage_records(ws, snapshot=snapshot), path, snapshot=passages_version,
                                threads=threads)  # fmt: skip
    return Bm25IndexReport(path=str(path), documents=info.documents, snapshot=passages_version,
                           skipped_empty=info.skipped_empty, skipped_bad_ids=info.skipped_bad_ids,
                           build_seconds=info.build_seconds)  # fmt: skip


def current_bm25(ws: Workspace, passages_version: str) -> Bm25IndexReport | None:
    """The finished index of these passages, when there is one."""
    path = IndexLayout.of(ws).bm25(passages_version)
    try:
        info = open_bm25_index(path, passages_version)
    except (FileNotFoundError, StaleIndexError):
        return None
    return Bm25IndexReport(path=str(path), documents=info.documents, snapshot=passages_version,
                           skipped_empty=info.skipped_empty, skipped_bad_ids=info.skipped_bad_ids,
                           build_seconds=info.build_seconds)  # fmt: skip


def build_bm25(ws: Workspace, threads: int | None = None, passages_version: str | None = None) -> Bm25IndexReport:
    """The BM25 index of `passages_version` (default: the current passages), built unless it
    exists (not published)."""
    java_preflight_task()
    version = passages_version or require_passages(ws)
    # A second build of the same index waits for the first (saying so), then finds it current.
    with writer_lock(ws.root, f"index:bm25:{version}", f"the BM25 index of passages {version}", wait_s=BUILD_WAIT_S):
        report = current_bm25(ws, version)
        if report is not None:
            stage_logger().info("BM25 index at %s is current (passages %s): no-op", report.path, version)
            report.noop = True
            return report
        report = build_bm25_task(str(ws.root), version, threads or os.cpu_count() or 1)
    log_report("bm25 index", report)
    return report


@flow(name="bm25-index")
def bm25_index_flow(workspace: str | None = None, threads: AtLeastOne | None = None) -> Bm25IndexReport:
    """Build the Lucene BM25 index of the passages table (title + text), unless it is current,
    and publish it (with the dense indexes of the same passages) to running searchers.

    Args:
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        threads: Indexing threads; empty: one per CPU core.
    """
    ws = Workspace.resolve(workspace)
    report = build_bm25(ws, threads)
    report.release = publish_indexes(ws, report.snapshot, change=ServingChange(add_bm25=True)).current
    return report
