"""Reads of the `passages` table that stages and searchers share: texts by id, streamed records,
random samples. Every read streams or filters by id, so memory follows what is asked for, not
the size of the corpus."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .releases import published_releases
from .snapshot import FileEntry, Snapshot
from .table_files import file_spans
from .table_pins import missing_files
from .tables import read_table, scan_table
from .workspace import Workspace

PASSAGE_COLUMNS = ["passage_id", "title", "text"]

PassageRecord = tuple[str, str | None, str | None]  # passage_id, title, text


def require_passages(ws: Workspace) -> str:
    """The passages table's version (what indexes and embeddings are keyed by); an empty table is
    an error that says how to fill it."""
    if ws.rows("passages") == 0:
        raise ValueError("the passages table is empty: ingest a dump or import passages first")
    return ws.table_version("passages")


def passage_files(ws: Workspace, *, except_source: str | None = None) -> list[Path]:
    """The Parquet files of the passages table (leaving out the rows of one source)."""
    return [ws.root / entry.path for entry in ws.snapshot().files("passages") if entry.source != except_source]


def passage_records(ws: Workspace, batch_size: int = 65_536, snapshot: Snapshot | None = None
                    ) -> Iterator[PassageRecord]:  # fmt: skip
    """(passage_id, title, text) of every passage, in table order (of `snapshot`, default the
    current one)."""
    for batch in ws.scan("passages", columns=PASSAGE_COLUMNS, batch_size=batch_size, snapshot=snapshot):
        yield from zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True)


def passages_with_ids(ws: Workspace, passage_ids: Sequence[str] | pa.Array | None,
                      files: Sequence[FileEntry] | None = None) -> pa.Table:  # fmt: skip
    """passage_id, title, text of the given ids (every passage when None), from the current
    passages table or from `files`: the passages a release's indexes were built from."""
    selector = None
    if passage_ids is not None:
        wanted = passage_ids if isinstance(passage_ids, pa.Array) else pa.array(sorted(set(passage_ids)), pa.string())
        selector = pc.field("passage_id").isin(wanted)
    if files is None:
        return ws.read_table("passages", columns=PASSAGE_COLUMNS, filter=selector)
    missing = missing_files(ws.root, files)
    if missing:
        raise FileNotFoundError(f"{len(missing)} passages file(s) are gone from {ws.root}, e.g. {missing[0]}: "
                                "they were deleted by hand (odqa keeps a published release's passages)")  # fmt: skip
    snapshot = Snapshot(tables={"passages": list(files)})
    return read_table(ws.root, snapshot, "passages", columns=PASSAGE_COLUMNS, filter=selector)


def known_passage_count(ws: Workspace, passage_ids: Sequence[str], snapshot: Snapshot | None = None) -> int:
    """How many of the distinct `passage_ids` the passages table holds (reads their ids only;
    in `snapshot` when given, else the current one)."""
    wanted = pa.array(sorted(set(passage_ids)), pa.string())
    return ws.read_table("passages", columns=["passage_id"], filter=pc.field("passage_id").isin(wanted),
                         snapshot=snapshot).num_rows  # fmt: skip


def passages_by_id(ws: Workspace, passage_ids: Sequence[str] | pa.Array | None,
                   files: Sequence[FileEntry] | None = None) -> dict[str, tuple[str | None, str | None]]:  # fmt: skip
    """passage_id -> (title, text) for the given ids (every passage when None; from `files` when
    given, see `passages_with_ids`)."""
    table = passages_with_ids(ws, passage_ids, files)
    pairs = zip(table.column("title").to_pylist(), table.column("text").to_pylist(), strict=True)
    return dict(zip(table.column("passage_id").to_pylist(), pairs, strict=True))


def passages_of_version(ws: Workspace, version: str | None, what: str) -> AbstractContextManager[Snapshot]:
    """A snapshot whose passages are `version` (None: the current ones), their files kept on disk
    while the block runs. An index's passage ids name the passages of the version it was built
    from; an import since may have changed their texts or dropped them. That version's files are
    in the current or a recent snapshot, or pinned by a published release; else
    `read_leases.TableVersionGone`."""
    if version is None:
        return ws.reading("passages", what=what)
    pinned = [Snapshot(tables={"passages": release.passages_files}) for release in published_releases(ws)
              if release.passages_version == version and release.passages_files]  # fmt: skip
    return ws.reading_version("passages", version, what, also=pinned)


def passages_by_id_at(ws: Workspace, passage_ids: Sequence[str], version: str | None
                      ) -> dict[str, tuple[str | None, str | None]]:  # fmt: skip
    """passage_id -> (title, text) of the given ids in the passages of `version` (a searcher's
    `passages_version`; None: the current passages)."""
    with passages_of_version(ws, version, what="passage texts") as snapshot:
        return passages_by_id(ws, passage_ids, snapshot.files("passages"))


def passage_texts(ws: Workspace, passage_ids: Sequence[str], *, with_title: bool, version: str | None
                  ) -> tuple[dict[str, str], int]:  # fmt: skip
    """passage_id -> text (or title, newline, text) for the given ids, and how many are missing,
    from the passages of `version` (a searcher's `passages_version`: the texts its ids were
    found in; None: the current passages)."""
    found = passages_by_id_at(ws, passage_ids, version)
    texts = {pid: f"{title or ''}\n{text or ''}" if with_title else (text or "") for pid, (title, text) in found.items()}
    return texts, len(set(passage_ids)) - len(texts)


def all_passage_texts(ws: Workspace, version: str) -> dict[str, str]:
    """passage_id -> text of every passage of `version` (answer matching over a whole corpus
    held in memory, the corpus an index was built from)."""
    texts: dict[str, str] = {}
    with passages_of_version(ws, version, what="answer matching") as snapshot:
        for batch in ws.scan("passages", columns=["passage_id", "text"], snapshot=snapshot):
            texts.update(zip(batch.column(0).to_pylist(), (t or "" for t in batch.column(1).to_pylist()), strict=True))
    return texts


def random_passages(ws: Workspace, n: int, rng: np.random.Generator, exclude: set[str]) -> pa.Table:
    """About `n` random passages not in `exclude`, in one streamed pass (bounded memory)."""
    total = ws.rows("passages")
    wanted = np.sort(rng.choice(total, size=min(total, n + len(exclude)), replace=False))
    excluded = pa.array(sorted(exclude), pa.string())
    picked, offset = [], 0
    for batch in ws.scan("passages", columns=PASSAGE_COLUMNS):
        rows = wanted[(wanted >= offset) & (wanted < offset + batch.num_rows)] - offset
        if len(rows):
            chosen = pa.Table.from_batches([batch]).take(pa.array(rows))
            picked.append(chosen.filter(pc.invert(pc.is_in(chosen["passage_id"], excluded))))
        offset += batch.num_rows
    if not picked:
        return pa.table({c: pa.array([], pa.string()) for c in PASSAGE_COLUMNS})
    return pa.concat_tables(picked).slice(0, n)


def passages_in_range(ws: Workspace, files: list[dict[str, Any]], start: int, stop: int) -> pa.Table:
    """Passages `[start, stop)` (table order) of the snapshot whose `passages` files are `files`
    (snapshot entries as dicts, in table order), reading only the files the range overlaps: how a
    task on another machine reads exactly its shard of one fixed snapshot."""
    entries = [FileEntry(**f) for f in files]
    parts: list[pa.RecordBatch] = []
    for span in file_spans([e.rows for e in entries], start, stop):
        one_file = Snapshot(tables={"passages": [entries[span.position]]})
        seen, want_to = 0, span.offset + span.rows
        for batch in scan_table(ws.root, one_file, "passages", PASSAGE_COLUMNS, batch_size=4096):
            lo, hi = max(span.offset - seen, 0), min(want_to - seen, batch.num_rows)
            if lo < hi:
                parts.append(batch.slice(lo, hi - lo))
            seen += batch.num_rows
            if seen >= want_to:
                break
        if seen < want_to:
            raise ValueError(f"{ws.root / entries[span.position].path}: {seen} rows, but the snapshot lists "
                             f"{entries[span.position].rows}")  # fmt: skip
    return pa.Table.from_batches(parts)


def duplicate_passage_ids(new_files: Sequence[Path], kept: Sequence[FileEntry], root: Path,
                          limit: int = 3) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:  # fmt: skip
    """Passage ids that would not be unique after adding `new_files` to the `kept` parts.

    Returns (id, times) repeated within the new files and (id, source) already held by a kept
    part, at most `limit` of each. DuckDB groups on disk-backed hash tables, so this scales to
    DPR's 21M ids without holding them in Python.
    """
    import duckdb

    if not new_files:
        return [], []
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        new = "[" + ", ".join(_sql_path(p) for p in new_files) + "]"
        within = con.execute(f"SELECT passage_id, count(*) FROM read_parquet({new}) GROUP BY 1 HAVING count(*) > 1 "
                             f"ORDER BY 1 LIMIT {int(limit)}").fetchall()  # fmt: skip
        if not kept:
            return [(r[0], r[1]) for r in within], []
        old = "[" + ", ".join(_sql_path(root / e.path) for e in kept) + "]"
        rows = con.execute(
            f"SELECT o.passage_id, o.filename FROM read_parquet({old}, filename = true) o "
            f"SEMI JOIN read_parquet({new}) n USING (passage_id) ORDER BY 1 LIMIT {int(limit)}"
        ).fetchall()
    finally:
        con.close()
    source_of = {str(root / e.path): e.source for e in kept}
    return [(r[0], r[1]) for r in within], [(r[0], source_of.get(r[1], r[1])) for r in rows]


def _sql_path(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"
