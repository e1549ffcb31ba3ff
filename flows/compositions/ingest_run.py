"""A re-index's ingest: every file the run takes is staged, then all are committed in one snapshot
switch, or none is.

A dump and each passages file get their own transaction and stage record (so a later identical
file is a no-op on its own), but they commit together (`storage.tables.commit_together`). Each
passages file is checked against the table as it will be after the whole run (unique ids across
the run's files and the dump). A file found malformed makes the run fail before anything is
committed, naming the file, line and what was expected, never a byte of its content; from a
watched folder it is set aside into ``rejected/`` first, so the next run takes the other files.
A file that changes while it is read is left for later, its rows dropped from the run.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any

from ...pipelines.passage_formats import PassageFormatError
from ...pipelines.wikipedia.dump_reader import DumpError
from ...storage import Workspace
from ...storage.fingerprint import stream_sha256
from ...storage.reports import Report
from ...storage.tables import Transaction, commit_together
from ..plumbing.runtime import stage_logger
from ..stages.passages import (
    ImportPassagesReport,
    held_rows,
    imported_before,
    passages_fingerprint,
    passages_import_lock,
    passages_stage,
    stage_passages,
)
from ..stages.wikipedia import SOURCE as WIKIPEDIA
from ..stages.wikipedia import StagedDump, stage_dump_incremental
from .incoming import Incoming, NotTaken, Taken, open_taken, set_aside, still_unchanged

CHANGED_WHILE_READ = "changed while it was read: taken once unchanged"


@dataclass
class IngestRunReport(Report):
    """What a re-index took: each file by outcome (added, replaced: it replaced its earlier rows,
    unchanged: imported before with identical content), each other entry with why not, and the
    stage report of the dump and of each passages file."""

    source: str
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)  # waits for a later run
    refused: dict[str, str] = field(default_factory=dict)  # never taken as it is
    ignored: dict[str, str] = field(default_factory=dict)  # no input of a re-index
    dump: dict[str, Any] | None = None
    passages: dict[str, dict[str, Any]] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for the run's log."""
        parts = [f"{title} {', '.join(names)}" for title, names in
                 (("added", self.added), ("replaced", self.replaced), ("unchanged", self.unchanged)) if names]
        parts += [f"{title}: {', '.join(f'{n} ({why})' for n, why in entries.items())}" for title, entries in
                  (("left for later", self.left), ("refused", self.refused)) if entries]  # fmt: skip
        return "; ".join(parts) or "nothing new"


class MalformedFilesError(ValueError):
    """Files of the run that cannot be read as what their names say; nothing of the run was committed."""


@dataclass
class _Run:
    """The run's staged transactions and what it found out so far."""

    ws: Workspace
    incoming: Incoming
    report: IngestRunReport
    group: list[Transaction] = field(default_factory=list)
    dump: StagedDump | None = None
    malformed: list[tuple[Taken, str]] = field(default_factory=list)
    done: list[str] = field(default_factory=list)  # what each file changed, logged once committed

    def drop(self, tx: Transaction) -> None:
        self.group.remove(tx)
        tx.abort()

    def abort(self) -> None:
        for tx in self.group:
            tx.abort()
        if self.dump is not None:
            self.dump.aborted()


def ingest_together(ws: Workspace, incoming: Incoming, wait_s: float = 0.0) -> IngestRunReport:
    """Stage the newest dump and every passages file `incoming` holds, commit them in one switch,
    and report; a malformed file fails the run (`MalformedFilesError`) with nothing committed.
    Nothing to take takes no lock (a scheduled run meeting a long `odqa import passages` goes on
    to its builds); files to take wait up to `wait_s` for such an import to finish."""
    log = stage_logger()
    report = IngestRunReport(source=str(incoming.source), left=dict(incoming.left), refused=dict(incoming.refused),
                             ignored=dict(incoming.ignored))  # fmt: skip
    run = _Run(ws, incoming, report)
    taking = incoming.dump is not None or bool(incoming.passages)
    locked = (passages_import_lock(ws, f"files of a re-index from {incoming.source}", wait_s) if taking
              else contextlib.nullcontext())  # fmt: skip
    with locked:
        try:
            if incoming.dump is not None:
                _stage_dump(run, incoming.dump)
            for taken in incoming.passages:
                _stage_passages_file(run, taken)
            if run.malformed:
                raise _refuse_malformed(run)
            if run.group:
                commit_together(run.group)
        except BaseException:
            run.abort()
            raise
    if run.dump is not None:
        run.dump.committed(ws)
        report.dump = run.dump.report.as_dict()
    for line in run.done:
        log.info("%s", line)
    log.info("ingested from %s: %s", incoming.source, report.summary())
    return report


def _stage_dump(run: _Run, taken: Taken) -> None:
    name = taken.path.name
    if not taken.unchanged(os.stat(taken.data, follow_symlinks=taken.given)):
        run.report.left[name] = "changed after it was looked at: taken once unchanged"
        return
    held = any(e.source == WIKIPEDIA for e in run.ws.snapshot().files("passages"))
    try:
        staged = stage_dump_incremental(run.ws, taken.data)
    except DumpError as error:
        run.malformed.append((taken, str(error)))
        return
    if staged.transaction is not None:
        if not taken.unchanged(os.stat(taken.data, follow_symlinks=taken.given)):
            staged.aborted()
            run.report.left[name] = CHANGED_WHILE_READ
            return
        run.group.append(staged.transaction)
    run.dump = staged
    report = staged.report
    outcome = run.report.unchanged if report.noop else run.report.replaced if held else run.report.added
    outcome.append(name)
    run.done.append(f"dump {name}: " + ("unchanged since the last ingest" if report.noop else
                    f"{report.pages_recleaned} pages cleaned again, {report.pages_reused} reused, "
                    f"{report.pages_removed} removed"))  # fmt: skip


def _stage_passages_file(run: _Run, taken: Taken) -> None:
    """Stage one passages file into a transaction of its own, part of the run's group; a no-op when
    imported before with identical content, left for later when it changes while read."""
    name, fmt = taken.path.name, str(taken.fmt)
    try:
        with open_taken(taken) as handle:
            stage_fp = passages_fingerprint(fmt, stream_sha256(handle))
            done = imported_before(run.ws, fmt, taken.path, stage_fp)
            if done is not None:
                _record(run, name, done, "unchanged")
                run.done.append(f"passages {name}: already imported with identical content")
                return
            handle.seek(0)
            held = held_rows(run.ws, fmt, taken.path)
            tx = run.ws.transaction(passages_stage(fmt, taken.path), fingerprint=stage_fp)
            run.group.append(tx)
            try:
                imported = stage_passages(run.ws, tx, fmt, taken.path, run=run.group, opened=handle,
                                          name_ids=taken.given)  # fmt: skip
            except PassageFormatError as error:
                run.drop(tx)
                run.malformed.append((taken, str(error)))
                return
            if not still_unchanged(taken, handle):
                run.drop(tx)
                run.report.left[name] = CHANGED_WHILE_READ
                return
    except NotTaken as error:
        (run.report.refused if error.refused else run.report.left)[name] = error.why
        return
    _record(run, name, imported, "replaced" if held else "added")
    run.done.append(f"passages {name}: {imported.passages} passages imported"
                    + (f", replacing its {held:,} earlier ones" if held else ""))


def _record(run: _Run, name: str, imported: ImportPassagesReport, outcome: str) -> None:
    getattr(run.report, outcome).append(name)
    run.report.passages[name] = imported.as_dict()


def _refuse_malformed(run: _Run) -> MalformedFilesError:
    """The run's failure: each malformed file with where and why (set aside from a watched folder)."""
    lines, stays = [], False
    for taken, why in run.malformed:
        where = set_aside(run.incoming, taken, why)
        stays = stays or where is None
        moved = f" (set aside as {where}: fix it and move it back)" if where else " (fix or remove it)"
        lines.append(f"{why}{moved}")
    others = sorted(set(run.report.added) | set(run.report.replaced))
    # (only once every malformed file is out of the way: one that stays fails the next run too)
    later = (f"; the other files ({', '.join(others)}) are taken by the next run"
             if others and run.incoming.folder and not stays else "")  # fmt: skip
    return MalformedFilesError(f"nothing of this re-index was committed: {len(lines)} malformed file"
                               f"{'s' if len(lines) != 1 else ''}{later}:\n" + "\n".join(lines))  # fmt: skip
