"""The workspace: the one place that knows where tables, indexes, models and plots live."""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from . import catalog, read_leases, tables
from .atomic import slug
from .owned_dirs import OwnedDir
from .snapshot import Snapshot, StageRecord, load_snapshot
from .workspace_marker import claim_workspace, mark_workspace, require_workspace, workspace_root

ENV_VAR = "ODQA_WORKSPACE"
DEFAULT_DIR = "workspace"


def chosen_path(path: str | os.PathLike[str] | None) -> str | os.PathLike[str]:
    """`--workspace` beats `$ODQA_WORKSPACE` beats `./workspace`."""
    return path if path not in (None, "") else os.environ.get(ENV_VAR) or DEFAULT_DIR


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def resolve(cls, path: str | os.PathLike[str] | None = None) -> Workspace:
        """The workspace a writer opens: `--workspace` beats `$ODQA_WORKSPACE` beats `./workspace`.

        A new or empty folder is created and becomes a workspace; a folder that holds other files
        and is not a workspace is refused (`storage.workspace_marker`)."""
        root = workspace_root(chosen_path(path))
        claim_workspace(root)
        return cls(root)

    @classmethod
    def open_existing(cls, path: str | os.PathLike[str] | None = None) -> Workspace:
        """The workspace a reader opens (same choice as `resolve`): it must be one already, and
        nothing is created in a folder that is not."""
        root = workspace_root(chosen_path(path))
        require_workspace(root)
        return cls(root)

    @classmethod
    def init(cls, path: str | os.PathLike[str] | None = None) -> Workspace:
        """`odqa init`: make the folder a workspace (created when missing), even when it holds
        other files; a workspace stays as it is."""
        root = workspace_root(chosen_path(path))
        mark_workspace(root)
        return cls(root)

    # -- folders --------------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        """The workspace's folder ``name``, created when missing, but only inside a root that
        exists: a process still holding a deleted workspace (a service, a worker) must never make
        it again (docs/boundaries.md), so there it is only named, and whoever writes into it
        fails with the path."""
        path = self.root / name
        with contextlib.suppress(FileNotFoundError):  # no parents: the root is not made again
            path.mkdir(exist_ok=True)
        return path

    @property
    def indexes_dir(self) -> Path:
        return self._dir("indexes")

    @property
    def models_dir(self) -> Path:
        return self._dir("models")

    @property
    def plots_dir(self) -> Path:
        return self._dir("plots")

    def plot_path(self, name: str) -> Path:
        """Where the plot called `name` goes (`<workspace>/plots/<name>.png`, name made file-safe;
        a long name, e.g. a comparison of many long run names, is cut and keeps a hash of the rest
        within the file system's 255-byte limit)."""
        safe = slug(name, "plot")
        if len(safe) > 150:
            safe = f"{safe[:130]}-{hashlib.sha256(safe.encode()).hexdigest()[:16]}"
        return self.plots_dir / f"{safe}.png"

    def plots(self, prefix: str) -> list[Path]:
        """The plots whose names start with `prefix`, sorted."""
        return sorted(self.plots_dir.glob(f"{slug(prefix, 'plot')}*.png"))

    @contextlib.contextmanager
    def scratch(self, purpose: str) -> Iterator[Path]:
        """A new folder for one stage's temporary files, on the workspace's disk, removed on exit.

        The folder is held by this process (`owned_dirs`): one left by a killed run (a DuckDB
        spill of a large import, gigabytes) is removed by the next stage that makes one."""
        owned = OwnedDir.create(self.tmp_dir, f"{slug(purpose, 'work')}-{uuid.uuid4().hex[:8]}")
        try:
            yield owned.path
        finally:
            owned.release()

    @property
    def cache_dir(self) -> Path:
        """Where the pipeline keeps its stage cache keys."""
        return self._dir("pipeline-cache")

    @property
    def tmp_dir(self) -> Path:
        """Scratch space on the workspace's disk (same filesystem, so renames are atomic)."""
        return self._dir("tmp")

    @property
    def catalog_path(self) -> Path:
        return self.root / catalog.CATALOG_FILE

    # -- snapshot and stages -----------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        return load_snapshot(self.root)

    def stage_record(self, stage: str) -> StageRecord | None:
        return self.snapshot().stages.get(stage)

    def stage_is_current(self, stage: str, fingerprint: str) -> bool:
        """True when `stage` last committed with exactly this input fingerprint."""
        record = self.stage_record(stage)
        return record is not None and record.fingerprint == fingerprint

    def table_version(self, table: str) -> str:
        return self.snapshot().table_version(table)

    def rows(self, table: str) -> int:
        return self.snapshot().rows(table)

    # -- writing ----------------------------------------------------------------------------
    def transaction(self, stage: str, fingerprint: str | None = None, resumable: bool = False) -> tables.Transaction:
        return tables.Transaction(self.root, stage, fingerprint=fingerprint, resumable=resumable)

    # -- reading ----------------------------------------------------------------------------
    def reading(self, *names: str, what: str) -> AbstractContextManager[Snapshot]:
        """The current snapshot, the files of its tables `names` kept on disk while the block runs
        (`read_leases`): pass it to `scan`/`read_table` to read one version throughout."""
        return read_leases.reading(self.root, names, what)

    def reading_version(self, table: str, version: str, what: str, also: Sequence[Snapshot] = ()
                        ) -> AbstractContextManager[Snapshot]:  # fmt: skip
        """A snapshot in which `table` has `version` (the current one, a recent one, else one of
        `also`), its files kept while the block runs: what a build keyed by that version reads."""
        return read_leases.reading_version(self.root, table, version, what, also)

    def read_table(self, table: str, columns: list[str] | None = None, filter=None,
                   snapshot: Snapshot | None = None) -> pa.Table:  # fmt: skip
        return tables.read_table(self.root, snapshot or self.snapshot(), table, columns=columns, filter=filter)

    def scan(
        self, table: str, columns: list[str] | None = None, batch_size: int = 65_536, filter=None,
        snapshot: Snapshot | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The table's batches from `snapshot` (default: the current one), its files leased while
        the stream runs."""
        return tables.scan_table(self.root, snapshot or self.snapshot(), table, columns, batch_size, filter=filter)

    def sql(self, query: str, limits: catalog.QueryLimits | None = None, snapshot: Snapshot | None = None) -> pa.Table:
        """One read-only query over every table (of `snapshot`, default the current one), in a
        sandbox, within `limits` (default: 60 s, a quarter of the memory, at most 4 GiB); writes
        are refused. The files it reads are leased while it runs."""
        with read_leases.reading(self.root, None, "odqa sql", snapshot) as read:
            return catalog.query_read_only(self.root, read, query, limits or catalog.QueryLimits(),
                                           self.duckdb_temp_dir)  # fmt: skip

    @property
    def duckdb_temp_dir(self) -> Path | None:
        """Where the sandboxed DuckDB connections spill what exceeds their memory limit; None in
        a workspace this process cannot write (its queries then stay within memory)."""
        try:
            return self.tmp_dir / "duckdb"
        except OSError:
            return None

    def refresh_catalog(self) -> None:
        catalog.refresh_catalog(self.root, self.snapshot(), strict=True)
