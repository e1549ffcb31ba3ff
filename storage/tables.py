"""Atomic Parquet table writes (transactions) and reads over the current snapshot.

A transaction stages complete Parquet parts (each written under a temporary name, then renamed),
and commit makes them visible together by switching the snapshot. Replacing a table's rows from
one *source* (e.g. the Wikipedia dump, an imported corpus) drops that source's old parts in the
same switch, which is what makes re-running a stage idempotent. A resumable transaction keeps its
staging folder, keyed by stage and fingerprint, across a crash, so the re-run can skip parts that
were already finished; any other transaction's staging folder is held by its process
(`owned_dirs`), so one left by a killed run is removed by the next transaction.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from .atomic import atomic_write_text, slug, write_parquet_atomic
from .catalog import refresh_catalog
from .locks import writer_lock
from .owned_dirs import OWNER_FILE, OwnedDir
from .read_leases import leased_paths, leases_locked, reading
from .schemas import conform, schema_for
from .snapshot import (
    HISTORY_KEEP,
    FileEntry,
    Snapshot,
    StageRecord,
    load_snapshot,
    prune_history,
    recent_snapshots,
    save_snapshot,
    workspace_lock,
)
from .table_files import EMPTY_DIR, TABLES_DIR, empty_table_file, table_paths
from .table_pins import pinned_paths

STAGING_DIR = "staging"
KEEP_SNAPSHOTS = 3
LEASES_WAIT_S = 30.0  # how long a commit's collection waits for the read leases' lock, then skips
ROWS_PER_PART = 250_000

Rows = pa.Table | pa.RecordBatch | list[dict[str, Any]]


def _to_table(data: Rows, table: str) -> pa.Table:
    if isinstance(data, list):
        data = pa.Table.from_pylist(data, schema=None) if data else pa.table({})
        if data.num_columns == 0:
            return schema_for(table).empty_table()
    return conform(data, table)


class ConcurrentUpdateError(RuntimeError):
    """Parts this transaction rewrote were replaced by another commit in the meantime."""


class PartWriter:
    """Streams rows of one table into staged parts of at most `rows_per_part` rows."""

    def __init__(self, tx: Transaction, table: str, source: str, prefix: str, rows_per_part: int):
        self._tx, self._table, self._source = tx, table, source
        self._prefix, self._rows_per_part = prefix, rows_per_part
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._parts = 0

    def write(self, data: Rows) -> None:
        table = _to_table(data, self._table)
        if table.num_rows == 0:
            return
        self._buffer.append(table)
        self._buffered += table.num_rows
        while self._buffered >= self._rows_per_part:
            self._flush(self._rows_per_part)

    def _flush(self, rows: int) -> None:
        merged = pa.concat_tables(self._buffer)
        head, tail = merged.slice(0, rows), merged.slice(rows)
        self._tx.write(self._table, head, source=self._source, part=f"{self._prefix}-{self._parts:06d}")
        self._parts += 1
        self._buffer = [tail] if tail.num_rows else []
        self._buffered = tail.num_rows

    def close(self) -> None:
        if self._buffered:
            self._flush(self._buffered)


class Transaction:
    """Stage parts for several tables; `commit()` makes them all visible in one switch."""

    def __init__(self, root: Path, stage: str, fingerprint: str | None = None, resumable: bool = False):
        self.root = root
        self.stage = stage
        self.fingerprint = fingerprint
        self.report: dict[str, Any] = {}
        self._replace_sources: dict[str, set[str]] = {}
        self._replace_tables: set[str] = set()
        self._drop_paths: dict[str, set[str]] = {}
        self._staged: dict[str, dict[str, tuple[str, int]]] = {}  # table -> part -> (source, rows)
        self._auto_parts: dict[str, int] = {}
        staging_root = root / STAGING_DIR
        self._lock = ExitStack()
        if resumable:
            if not fingerprint:
                raise ValueError("a resumable transaction needs a fingerprint")
            # The stage's writer lock: a second run of the stage (another dump, say) is refused,
            # naming this one, instead of deleting the staging this run resumes from.
            self._lock.enter_context(writer_lock(root, f"stage:{stage}", f"the stage {stage!r}"))
            name = f"{slug(stage)}-{fingerprint[:16]}"
            for old in staging_root.glob(f"{slug(stage)}-*"):  # an earlier attempt with other inputs
                if old.name != name and not (old / OWNER_FILE).exists():  # (not another run's own folder)
                    shutil.rmtree(old, ignore_errors=True)
        self.resumable = resumable
        self._owned: OwnedDir | None = None
        if resumable:
            self.staging = staging_root / name
            self.staging.mkdir(parents=True, exist_ok=True)
        else:  # held by this process; a killed run's folder is reclaimed by the next transaction
            self._owned = OwnedDir.create(staging_root, f"{slug(stage)}-{uuid.uuid4().hex[:12]}")
            self._lock.callback(self._owned.release)
            self.staging = self._owned.path
        self._txid = uuid.uuid4().hex[:12]
        self._closed = False

    # -- declaring what the commit replaces ---------------------------------------------------
    def replace_source(self, table: str, source: str) -> None:
        """At commit, drop the table's existing parts that came from `source`."""
        schema_for(table)
        self._replace_sources.setdefault(table, set()).add(source)

    def replace_table(self, table: str) -> None:
        """At commit, drop all existing parts of the table (a full rewrite)."""
        schema_for(table)
        self._replace_tables.add(table)

    # -- staging ------------------------------------------------------------------------------
    def _part_path(self, table: str, part: str) -> Path:
        return self.staging / table / f"{slug(part)}.parquet"

    def adopt_part(self, table: str, part: str, source: str) -> None:
        """Take over a part staged by an earlier, interrupted attempt of this transaction."""
        path = self._part_path(table, part)
        rows = pq.ParquetFile(path).metadata.num_rows
        self._staged.setdefault(table, {})[part] = (source, rows)

    def write(self, table: str, data: Rows, source: str, part: str | None = None) -> None:
        """Stage `data` as one part of `table` (written completely before it is named)."""
        arrow = _to_table(data, table)
        if part is None:
            index = self._auto_parts.get(table, 0)
            self._auto_parts[table] = index + 1
            part = f"part-{index:06d}"
        if arrow.num_rows == 0:
            return
        write_parquet_atomic(arrow, self._part_path(table, part))
        self._staged.setdefault(table, {})[part] = (source, arrow.num_rows)

    def write_group(self, key: str, parts: dict[str, Rows], source: str, meta: dict[str, Any] | None = None) -> None:
        """Stage one part per table under `key`, then mark the group finished.

        Chunked stages (ingest, encoding) call this per chunk; after a crash, `group_done(key)`
        tells the resumed run which chunks it can take over instead of recomputing them.
        """
        staged: dict[str, int] = {}
        for table, data in parts.items():
            self.write(table, data, source=source, part=key)
            if key in self._staged.get(table, {}):
                staged[table] = self._staged[table][key][1]
        marker = self.staging / "_done" / f"{slug(key)}.json"
        marker.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(marker, json.dumps({"source": source, "rows": staged, "meta": meta or {}}))

    def group_done(self, key: str) -> dict[str, Any] | None:
        """The group's `meta` (and its parts adopted) when an earlier attempt finished `key`."""
        marker = self.staging / "_done" / f"{slug(key)}.json"
        if not marker.exists():
            return None
        info = json.loads(marker.read_text(encoding="utf-8"))
        for table in info["rows"]:
            self.adopt_part(table, key, info["source"])
        return info.get("meta", {})

    def rewrite(
        self,
        table: str,
        transform: Callable[[pa.Table], pa.Table],
        select: Callable[[FileEntry], bool] | None = None,
    ) -> int:
        """Rewrite existing parts of `table` through `transform`, keeping each part's source.

        Used to update a column of rows other stages wrote (hard negatives, domain labels).
        The replaced parts are dropped by path at commit; if another commit removed one of them
        meanwhile, the commit fails instead of silently losing that update. Returns the parts
        rewritten.
        """
        rewritten = 0
        with reading(self.root, [table], f"rewrite {table}") as snapshot:  # its parts kept while read
            for number, entry in enumerate(snapshot.files(table)):
                if select is not None and not select(entry):
                    continue
                data = ds.dataset([str(self.root / entry.path)], schema=schema_for(table), format="parquet").to_table()
                self.write(table, transform(data), source=entry.source, part=f"rewrite-{number:06d}")
                self._drop_paths.setdefault(table, set()).add(entry.path)
                rewritten += 1
        return rewritten

    def staged_files(self, table: str) -> list[Path]:
        """The parts of `table` staged so far, for checks that must see them before commit."""
        return [self._part_path(table, part) for part in sorted(self._staged.get(table, {}))]

    def writer(self, table: str, source: str, prefix: str = "part", rows_per_part: int = ROWS_PER_PART) -> PartWriter:
        return PartWriter(self, table, source, prefix, rows_per_part)

    # -- commit / abort -----------------------------------------------------------------------
    def commit(self) -> Snapshot:
        return commit_together([self])

    def staged_entries(self, table: str) -> list[FileEntry]:
        """The parts of `table` staged so far as entries (paths in the staging folder, relative
        to the root), for checks that must see them beside the committed parts."""
        return [FileEntry(path=str(self._part_path(table, part).relative_to(self.root)), source=source, rows=rows)
                for part, (source, rows) in sorted(self._staged.get(table, {}).items())]  # fmt: skip

    def _touched(self) -> set[str]:
        return set(self._replace_sources) | self._replace_tables | set(self._staged) | set(self._drop_paths)

    def _kept(self, table: str, entries: list[FileEntry]) -> list[FileEntry]:
        """The entries of `table` this transaction keeps; refused when a part it rewrote is gone."""
        dropped = self._drop_paths.get(table, set())
        if dropped - {e.path for e in entries}:
            raise ConcurrentUpdateError(
                f"table {table!r} was changed by another stage while {self.stage!r} rewrote it; run the stage again"
            )
        if table in self._replace_tables:
            return []
        sources = self._replace_sources.get(table, set())
        return [e for e in entries if e.path not in dropped and e.source not in sources]

    def _targets(self, table: str) -> list[tuple[Path, FileEntry]]:
        """(staged part, its entry once committed) of every part staged for `table`."""
        targets = []
        for part in sorted(self._staged.get(table, {})):
            source, rows = self._staged[table][part]
            target = Path(TABLES_DIR) / table / f"{self._txid}-{slug(part)}.parquet"
            targets.append((self._part_path(table, part), FileEntry(path=str(target), source=source, rows=rows)))
        return targets

    def _record(self, version: int) -> StageRecord | None:
        if self.fingerprint is None:
            return None
        return StageRecord(fingerprint=self.fingerprint, version=version, finished_at=time.time(), report=self.report)

    def _closed_after_commit(self) -> None:
        self._closed = True
        shutil.rmtree(self.staging, ignore_errors=True)
        self._lock.close()

    def abort(self) -> None:
        """Forget staged parts; a resumable transaction keeps them for the next attempt."""
        self._closed = True
        if not self.resumable:
            shutil.rmtree(self.staging, ignore_errors=True)
        self._lock.close()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.commit()
            else:
                self.abort()
        finally:
            self._lock.close()  # also when the commit itself failed


def commit_together(transactions: Sequence[Transaction]) -> Snapshot:
    """Make the staged parts and stage records of every transaction visible in one snapshot switch.

    A run that writes several sources (a re-index taking a dump and passages files) commits them
    all or none: each transaction is checked before any part moves, so a refusal leaves every
    staged part where it is. Later transactions see the earlier ones' parts (a source replaced by
    a later one is dropped). Each fingerprinted transaction records its own stage, so each input
    is a no-op on its own the next time.
    """
    if not transactions:
        raise ValueError("no transaction to commit")
    if any(tx._closed for tx in transactions):
        raise RuntimeError("transaction already closed")
    root = transactions[0].root
    if any(tx.root != root for tx in transactions):
        raise ValueError("transactions of different workspaces cannot commit together")
    with workspace_lock(root):
        snapshot = load_snapshot(root)
        tables = {name: list(entries) for name, entries in snapshot.tables.items()}
        moves: list[tuple[Path, Path]] = []
        for tx in transactions:
            for table in tx._touched():
                targets = tx._targets(table)
                tables[table] = tx._kept(table, tables.get(table, [])) + [entry for _, entry in targets]
                moves.extend((staged, root / entry.path) for staged, entry in targets)
        for staged, target in moves:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, target)
        version = snapshot.version + 1
        stages = dict(snapshot.stages)
        for tx in transactions:
            if (record := tx._record(version)) is not None:
                stages[tx.stage] = record
        committed = Snapshot(version=version, tables=tables, stages=stages)
        save_snapshot(root, committed)
        _collect_garbage(root)
        # Under the lock: two commits from threads of one process (a thread or in-process Dask
        # runner) would otherwise write the catalog's views at once (a DuckDB write-write
        # conflict), and an older snapshot's views could land after a newer one's.
        refresh_catalog(root, committed, strict=False)
    for tx in transactions:
        tx._closed_after_commit()
    return committed


def entries_after(transactions: Sequence[Transaction], table: str, leaving_out: Transaction) -> list[FileEntry]:
    """What `table` would hold once `transactions` commit together, without the rows `leaving_out`
    staged or replaces: what its new rows must not clash with (unique ids), checked before the
    commit. Staged parts are listed by their paths in the staging folder."""
    if leaving_out not in transactions:
        raise ValueError("leaving_out must be one of the transactions")
    entries = load_snapshot(leaving_out.root).files(table)
    for tx in transactions:
        entries = tx._kept(table, entries) + (tx.staged_entries(table) if tx is not leaving_out else [])
    return entries


def _collect_garbage(root: Path) -> None:
    """Delete table files no recent snapshot references (leftovers of killed or old commits), no
    published release still serves (`table_pins`) and no running reader reads (`read_leases`)."""
    keep = pinned_paths(root)
    for snap in recent_snapshots(root, KEEP_SNAPSHOTS):
        for entries in snap.tables.values():
            keep.update(e.path for e in entries)
    tables_dir = root / TABLES_DIR
    try:
        with leases_locked(root, timeout_s=LEASES_WAIT_S):
            keep |= leased_paths(root)
            for path in tables_dir.glob("*/*.parquet"):
                if path.parent.name == EMPTY_DIR:
                    continue
                if str(path.relative_to(root)) not in keep:
                    path.unlink(missing_ok=True)
    except TimeoutError:  # a reader stopped (Ctrl-Z) while it wrote its lease: collect next time
        return
    prune_history(root, keep=HISTORY_KEEP)


def table_dataset(root: Path, snapshot: Snapshot, table: str) -> ds.Dataset:
    """A pyarrow dataset over the table's current parts, with the registered schema."""
    schema = schema_for(table)
    paths = table_paths(root, snapshot, table) or [empty_table_file(root, table)]
    return ds.dataset([str(p) for p in paths], schema=schema, format="parquet")


def read_table(root: Path, snapshot: Snapshot, table: str, columns: list[str] | None = None, filter=None) -> pa.Table:
    return table_dataset(root, snapshot, table).to_table(columns=columns, filter=filter)


def scan_table(
    root: Path,
    snapshot: Snapshot,
    table: str,
    columns: list[str] | None = None,
    batch_size: int = 65_536,
    filter=None,
) -> Iterator[pa.RecordBatch]:
    """Stream a table in file order with bounded memory, its files leased until the stream ends
    (`read_leases`): commits meanwhile do not delete them under it."""
    with reading(root, [table], f"scan {table}", snapshot):
        dataset = table_dataset(root, snapshot, table)
        yield from dataset.to_batches(columns=columns, batch_size=batch_size, filter=filter)
