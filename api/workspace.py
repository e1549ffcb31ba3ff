"""A workspace from Python: its searchers, its tables (Arrow or DuckDB, read-only) and evaluation.

`odqa.open_workspace(path)` opens an existing workspace (`--workspace` of the verbs) and creates
nothing: a typo in a path, or a folder odqa did not make a workspace, is an error here. Its DuckDB
connections (`sql`, `duckdb`, `connection`) share one sandbox and its bounds
(`storage.catalog.sandboxed_connection`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from ..models.searchers import RetrieverChoice, open_searcher
from ..pipelines.dense.hybrid import DEFAULT_DEPTH
from ..storage.catalog import DEFAULT_TIMEOUT_S, QueryLimits, sandboxed_connection
from ..storage.choices import IndexType, RetrieverKind, RunPassages
from ..storage.read_leases import reading
from ..storage.snapshot import Snapshot, load_snapshot
from ..storage.table_files import known_tables
from ..storage.tables import table_dataset
from ..storage.workspace import Workspace as StorageWorkspace
from .search import Searcher


class Workspace:
    """An odqa workspace opened for reading and searching (the pipeline's stages write it)."""

    def __init__(self, storage: StorageWorkspace) -> None:
        self.storage = storage
        self._held: Snapshot | None = None  # the snapshot a `reading()` block reads

    @property
    def root(self) -> Path:
        return self.storage.root

    def __repr__(self) -> str:
        return f"odqa.Workspace({str(self.root)!r})"

    # -- searching ---------------------------------------------------------------------------
    def searcher(self, kind: RetrieverKind = "bm25", model: str | None = None, *, index_type: IndexType = "flat",
                 alpha: float | None = None, depth: int = DEFAULT_DEPTH) -> Searcher:  # fmt: skip
        """A `bm25`, `dense` or `hybrid` searcher (dense and hybrid: `model` is a model id of the
        `models` table, a folder or a Hugging Face name whose `index_type` index was built with
        `odqa index build`; hybrid: `alpha` weighs BM25, default the one `odqa tune-hybrid` stored)."""
        choice = RetrieverChoice(kind=kind, model=model, index_type=index_type, alpha=alpha, depth=depth)
        return Searcher(self.storage, open_searcher(self.storage, choice).searcher)

    # -- reading -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def reading(self) -> Iterator[Workspace]:
        """One version of every table for the block, however many commits land meanwhile: `tables`,
        `table`, `duckdb` (and the relations made in the block) and `sql` read the snapshot that was
        current when the block began, its files kept on disk (a read lease) until the block ends.
        Outside a block each call reads the current tables, and a relation of `duckdb` reads the
        parts current when it was made, which later commits may delete (three commits on)."""
        with reading(self.root, None, "odqa.Workspace.reading()") as snapshot:
            outer, self._held = self._held, snapshot
            try:
                yield self
            finally:
                self._held = outer

    def _snapshot(self) -> Snapshot:
        return self._held or load_snapshot(self.root)

    def tables(self) -> list[str]:
        """The names of the workspace's tables (core tables exist even when empty)."""
        return list(known_tables(self._snapshot()))

    def table(self, name: str, columns: list[str] | None = None) -> pa.Table:
        """The table's current rows as Arrow (`columns` picks some)."""
        return self.storage.read_table(name, columns=columns, snapshot=self._held)

    def duckdb(self, name: str, connection: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyRelation:
        """The table as a lazy DuckDB relation over its current Parquet parts: filter, join and
        aggregate it in DuckDB without loading it; a relation reads, it never writes the workspace.

        Without `connection` the relation lives in a new `connection()`: sandboxed as `sql` is.
        A connection of your own is used as you made it (odqa does not lock your settings): it
        reaches whatever your DuckDB can reach, which is yours to decide."""
        dataset = table_dataset(self.root, self._snapshot(), name)
        return (connection or self.connection()).from_arrow(dataset)

    def connection(self, *, memory_limit: str | None = None, threads: int | None = None) -> duckdb.DuckDBPyConnection:
        """A new in-memory DuckDB connection with `sql`'s sandbox: it reads no file and reaches no
        network, loads no extension, and its settings (the sandbox, `memory_limit`, `threads`;
        defaults as `sql`'s) are locked. Pass it to `duckdb(name, connection)` to join tables."""
        return sandboxed_connection(QueryLimits(timeout_s=None, memory_limit=memory_limit, threads=threads),
                                    self.storage.duckdb_temp_dir)  # fmt: skip

    def sql(self, query: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, memory_limit: str | None = None,
            threads: int | None = None) -> pa.Table:  # fmt: skip
        """One read-only query over every table (as `odqa sql`); statements that write are refused.
        It is stopped after `timeout_s` seconds, and DuckDB keeps within `memory_limit` (`8GB`,
        `50%`; default a quarter of the memory, at most 4 GiB) and `threads` (default half the
        cores); a query that passes a bound raises `QueryLimitError` naming it."""
        return self.storage.sql(query, QueryLimits(timeout_s=timeout_s, memory_limit=memory_limit, threads=threads),
                                snapshot=self._held)  # fmt: skip

    # -- evaluating --------------------------------------------------------------------------
    def evaluate(self, run: str, ks: tuple[int, ...] = (), match: str = "auto", passages: RunPassages = "run"
                 ) -> pa.Table:  # fmt: skip
        """The metrics `odqa evaluate --run RUN` computes for a run of the `runs` table (R@K
        micro, per relation and macro; the qrels metrics), as rows shaped like the `metrics`
        table; nothing is written. `ks` defaults to odqa's cut-offs, `match` as `--match`,
        `passages` as `--passages` (run: the texts of the passages the run was retrieved from)."""
        # The verb's own scoring; it imports Prefect's library (and starts nothing).
        from ..flows.stages.evaluate import score_run, scoring_passages
        from ..pipelines.evaluation.metrics import DEFAULT_KS, metrics_table
        from ..storage.choices import MATCH_CHOICES

        cutoffs = tuple(sorted(set(ks or DEFAULT_KS)))
        if cutoffs[0] < 1:
            raise ValueError(f"cut-offs must be positive, got {cutoffs}")
        if match not in MATCH_CHOICES:
            raise ValueError(f"answer matching must be one of {MATCH_CHOICES}, got {match!r}")
        tables = [metrics_table(scores.values, run=run, dataset=scores.dataset, split=scores.split)
                  for scores in score_run(self.storage, run, cutoffs, match,
                                          scoring_passages(self.storage, run, passages))]  # fmt: skip
        return pa.concat_tables(tables)


def open_workspace(path: str | os.PathLike[str] | None = None) -> Workspace:
    """The workspace at `path` (default: $ODQA_WORKSPACE, else ./workspace). It must be an odqa
    workspace (made by `odqa init` or a verb that brings data in); nothing is created."""
    return Workspace(StorageWorkspace.open_existing(path))
