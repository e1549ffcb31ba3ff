"""A service that loads a release after an ingest replaced its passages (a re-index still
encoding, or withheld) shows the passages the release's indexes found: every one they hold, with
the text they were built from."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from odqa.service.releases import ReleaseHolder
from odqa.storage import Workspace
from odqa.storage.passages import passages_by_id
from odqa.storage.releases import current_release
from odqa.storage.tables import Transaction


def _ingest_newer_passages(ws: Workspace, passages: pa.Table) -> None:
    """What an ingest of a newer dump does to the table: texts changed, pages gone."""
    with Transaction(ws.root, "test-newer-dump") as tx:
        tx.replace_table("passages")
        tx.write("passages", passages, "newer-dump")


def test_a_service_started_after_an_ingest_shows_the_passages_of_its_release(workspace_copy: Path) -> None:
    ws = Workspace.resolve(workspace_copy)
    release = current_release(ws)
    served = passages_by_id(ws, None)
    table = ws.read_table("passages")
    newer = table.slice(0, table.num_rows - 10)
    newer = newer.set_column(newer.schema.get_field_index("text"), "text",
                             pc.binary_join_element_wise(newer["text"], pa.scalar(" (edited)"), ""))  # fmt: skip
    for _ in range(4):  # more commits than the snapshots a commit keeps files for
        _ingest_newer_passages(ws, newer)
    assert ws.rows("passages") == len(served) - 10 and ws.table_version("passages") != release.passages_version

    holder = ReleaseHolder(ws, poll_s=3600)
    holder.start()
    try:
        with holder.lease() as loaded:
            assert loaded.release == release.release
            assert loaded.passages == served
            hits = loaded.dense.submit([("Where was Marie Curie born?", 5)]).result(timeout=60)[0]
            assert hits and all(loaded.passage(pid) == served[pid] for pid, _ in hits)
    finally:
        holder.stop()
