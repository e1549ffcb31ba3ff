"""Category graph input from MediaWiki SQL dumps, as rows of the `category_links` table.

The XML ingest already yields `category_links` rows (page_id, title, namespace, category, kind),
which the labeller reads directly. This module produces the same rows from `page.sql.gz` +
`categorylinks.sql.gz` (legacy schema with `cl_to`, or the 2025 schema with `cl_target_id` +
`linktarget.sql.gz`), plus `articles` rows for the article and category pages (namespaces 0 and
14, like the XML ingest's rows for them), redirects flagged; their targets come from the optional
`redirect.sql.gz`, which lets the labeller follow article and (hard) category redirects.

Why DuckDB over temporary Parquet for the join: `cl_from` is a page id, and English Wikipedia has
60M+ pages. A Python dict id -> (namespace, title) costs ~10 GB; numpy arrays + an Arrow title
column still hold ~2-3 GB and need a hand-written chunked join. Instead each dump is streamed once
into a Parquet file (only the needed columns and namespaces, titles already normalized), and
DuckDB joins them with a memory limit, spilling to the work directory when it must; the result
streams back as Arrow batches. Memory is then bounded by DuckDB's limit plus one parser chunk.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...storage.schemas import row_schema
from ..progress import Progress
from .sql_dump import DumpStats, SqlDumpError, SqlDumpReader, dump_columns
from .titles import NAMESPACE_NAMES, normalize_titles

__all__ = [
    "ARTICLE_SCHEMA",
    "CATEGORY_LINK_SCHEMA",
    "SqlCategoryGraph",
    "SqlGraphStats",
    "soft_category_redirect",
]

CATEGORY_NS = 14
CATEGORY_LINK_SCHEMA = row_schema("category_links")
ARTICLE_SCHEMA = row_schema("articles")

_PAGE_COLUMNS = pa.schema(
    [
        ("page_id", pa.int64()),
        ("page_namespace", pa.int32()),
        ("page_title", pa.string()),
        ("page_is_redirect", pa.int8()),
    ]
)
_LEGACY_LINKS = pa.schema([("cl_from", pa.int64()), ("cl_to", pa.string()), ("cl_type", pa.string())])
_TARGET_LINKS = pa.schema([("cl_from", pa.int64()), ("cl_target_id", pa.int64()), ("cl_type", pa.string())])
_LINKTARGET = pa.schema([("lt_id", pa.int64()), ("lt_namespace", pa.int32()), ("lt_title", pa.string())])
_REDIRECT = pa.schema(
    [
        ("rd_from", pa.int64()),
        ("rd_namespace", pa.int32()),
        ("rd_title", pa.string()),
        ("rd_interwiki", pa.string()),
        ("rd_fragment", pa.string()),
    ]
)
_SOFT_REDIRECT = re.compile(
    r"\{\{\s*(?:category[ _]redirect|cat[ _]?redirect|seecat|see[ _]category|categoryredirect)\s*\|\s*"
    r"(?:1\s*=\s*)?(?:\s*:?\s*category\s*:)?([^|}]+)",
    re.IGNORECASE,
)


def _redirect_targets(batch: pa.RecordBatch) -> pa.Array:
    """Targets as "Prefix:Title#fragment" from redirect.sql's namespace, title, fragment columns."""
    namespaces = np.clip(batch.column("rd_namespace").to_numpy(zero_copy_only=False), 0, None)
    top = int(namespaces.max()) if len(namespaces) else 0
    names = pa.array(
        [f"{NAMESPACE_NAMES[ns]}:" if ns in NAMESPACE_NAMES and ns else "" for ns in range(top + 1)]
    )
    prefixes = names.take(pa.array(namespaces))
    fragment = batch.column("rd_fragment")
    suffix = pc.if_else(
        pc.fill_null(pc.not_equal(fragment, ""), False), pc.binary_join_element_wise("#", fragment, ""), ""
    )
    return pc.binary_join_element_wise(prefixes, normalize_titles(batch.column("rd_title")), suffix, "")


def soft_category_redirect(wikitext: str) -> str | None:
    """The target of a `{{Category redirect|X}}` soft redirect on a category page, if any.

    English Wikipedia moves categories with this template rather than `#REDIRECT`; the XML ingest
    can record it as the category page's `redirect_target` ("Category:X") so the labeller follows it.
    """
    m = _SOFT_REDIRECT.search(wikitext)
    if m is None:
        return None
    name = m.group(1).strip()
    return f"Category:{name}" if name else None


@dataclass
class SqlGraphStats:
    """What the SQL ingest read, kept, and could not join (for the stage report)."""

    page: DumpStats = field(default_factory=DumpStats)
    categorylinks: DumpStats = field(default_factory=DumpStats)
    linktarget: DumpStats | None = None
    schema: str = ""  # "cl_to" (legacy) or "cl_target_id" (linktarget)
    pages_kept: int = 0  # pages in the kept namespaces
    links_staged: int = 0
    links_dangling: int = 0  # cl_from is no page of the kept namespaces (or not in page.sql)
    links_unknown_target: int = 0  # cl_target_id not a category in linktarget.sql
    articles: int = 0
    redirects: int = 0
    redirect: DumpStats | None = None
    redirect_targets: int = 0  # redirect pages (namespaces 0 and 14) whose target redirect.sql gives

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, dump in (
            ("page", self.page),
            ("categorylinks", self.categorylinks),
            ("linktarget", self.linktarget),
        ):
            if dump is None:
                continue
            out[f"{name}_rows"] = dump.rows
            out[f"{name}_skipped_statements"] = dump.skipped_statements
            out[f"{name}_skipped_rows"] = dump.skipped_rows
        out.update(
            schema=self.schema,
            pages_kept=self.pages_kept,
            links_staged=self.links_staged,
            links_dangling=self.links_dangling,
            links_unknown_target=self.links_unknown_target,
            articles=self.articles,
            redirects=self.redirects,
            redirect_targets=self.redirect_targets,
        )
        return out


class SqlCategoryGraph:
    """Stage the dumps into Parquet once, then stream `category_links` and `articles` rows.

    Use as a context manager (the staged files live in a temporary directory under `work_dir`):

        with SqlCategoryGraph(page, categorylinks, linktarget) as graph:
            for batch in graph.category_links(): ...
            for batch in graph.articles(): ...

    `namespaces`: child pages kept (0 articles, 14 categories: all the labeller walks).
    `skip_bad`: passed to the dump reader (corrupt statements/rows skipped and counted).
    """

    def __init__(
        self,
        page: str | Path,
        categorylinks: str | Path,
        linktarget: str | Path | None = None,
        redirect: str | Path | None = None,
        *,
        skip_bad: bool = False,
        namespaces: Sequence[int] = (0, CATEGORY_NS),
        work_dir: str | Path | None = None,
        memory_limit: str = "2GB",
        threads: int = 2,
        batch_rows: int = 1_000_000,
        progress: bool | None = None,
    ) -> None:
        self.page = Path(page)
        self.categorylinks = Path(categorylinks)
        self.linktarget = Path(linktarget) if linktarget is not None else None
        self.redirect = Path(redirect) if redirect is not None else None
        self.skip_bad = skip_bad
        self.namespaces = list(namespaces)
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self.memory_limit = memory_limit
        self.threads = threads
        self.batch_rows = batch_rows
        self.progress = progress
        self.stats = SqlGraphStats()
        self._tmp: Path | None = None

    # -- staging ----------------------------------------------------------------------------
    def __enter__(self) -> SqlCategoryGraph:
        self._tmp = Path(tempfile.mkdtemp(prefix="odqa-categories-", dir=self.work_dir))
        try:
            self._stage()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def _path(self, name: str) -> str:
        assert self._tmp is not None, "use SqlCategoryGraph as a context manager"
        return str(self._tmp / f"{name}.parquet")

    def _stage(self) -> None:
        link_columns = dump_columns(self.categorylinks, "categorylinks")
        if link_columns is None:
            raise SqlDumpError(
                self.categorylinks, 0, "no CREATE TABLE `categorylinks` before the first INSERT"
            )
        if "cl_to" in link_columns:
            self.stats.schema = "cl_to"
            link_schema = _LEGACY_LINKS
        elif "cl_target_id" in link_columns:
            self.stats.schema = "cl_target_id"
            link_schema = _TARGET_LINKS
            if self.linktarget is None:
                raise ValueError(
                    f"{self.categorylinks} uses cl_target_id (MediaWiki 1.44+ schema): pass the linktarget dump too"
                )
        else:
            raise SqlDumpError(
                self.categorylinks, 0, f"categorylinks has neither cl_to nor cl_target_id: {link_columns}"
            )

        keep_ns = pa.array(self.namespaces, pa.int32())
        page_reader = self._reader(self.page, "page", _PAGE_COLUMNS)
        self.stats.page = page_reader.stats
        kept = self._write(
            self._path("page"),
            pa.schema(
                [
                    ("page_id", pa.int64()),
                    ("namespace", pa.int32()),
                    ("title", pa.string()),
                    ("is_redirect", pa.bool_()),
                ]
            ),
            (
                pa.record_batch(
                    [
                        b.column("page_id"),
                        b.column("page_namespace"),
                        normalize_titles(b.column("page_title")),
                        pc.not_equal(b.column("page_is_redirect"), 0),
                    ],
                    names=["page_id", "namespace", "title", "is_redirect"],
                )
                for b in (
                    batch.filter(pc.is_in(batch.column("page_namespace"), keep_ns))
                    for batch in self._progress(page_reader, "page.sql")
                )
            ),
        )
        self.stats.pages_kept = kept

        if link_schema is _TARGET_LINKS:
            lt_reader = self._reader(self.linktarget, "linktarget", _LINKTARGET)  # type: ignore[arg-type]
            self.stats.linktarget = lt_reader.stats
            self._write(
                self._path("linktarget"),
                pa.schema([("lt_id", pa.int64()), ("category", pa.string())]),
                (
                    pa.record_batch(
                        [b.column("lt_id"), normalize_titles(b.column("lt_title"))],
                        names=["lt_id", "category"],
                    )
                    for b in (
                        batch.filter(pc.equal(batch.column("lt_namespace"), CATEGORY_NS))
                        for batch in self._progress(lt_reader, "linktarget.sql")
                    )
                ),
            )

        if self.redirect is not None:
            rd_reader = self._reader(self.redirect, "redirect", _REDIRECT)
            self.stats.redirect = rd_reader.stats
            self._write(
                self._path("redirect"),
                pa.schema([("rd_from", pa.int64()), ("target", pa.string())]),
                (
                    pa.record_batch([b.column("rd_from"), _redirect_targets(b)], names=["rd_from", "target"])
                    for b in (
                        # Interwiki redirects point outside this wiki: only local ones are kept.
                        batch.filter(pc.fill_null(pc.equal(batch.column("rd_interwiki"), ""), True))
                        for batch in self._progress(rd_reader, "redirect.sql")
                    )
                ),
            )

        cl_reader = self._reader(self.categorylinks, "categorylinks", link_schema)
        self.stats.categorylinks = cl_reader.stats
        if link_schema is _LEGACY_LINKS:
            staged = (
                pa.record_batch(
                    [b.column("cl_from"), normalize_titles(b.column("cl_to")), b.column("cl_type")],
                    names=["cl_from", "category", "kind"],
                )
                for b in self._progress(cl_reader, "categorylinks.sql")
            )
            staged_schema = pa.schema(
                [("cl_from", pa.int64()), ("category", pa.string()), ("kind", pa.string())]
            )
        else:
            staged = (
                pa.record_batch(
                    [b.column("cl_from"), b.column("cl_target_id"), b.column("cl_type")],
                    names=["cl_from", "cl_target_id", "kind"],
                )
                for b in self._progress(cl_reader, "categorylinks.sql")
            )
            staged_schema = pa.schema(
                [("cl_from", pa.int64()), ("cl_target_id", pa.int64()), ("kind", pa.string())]
            )
        self.stats.links_staged = self._write(self._path("links"), staged_schema, staged)
        self._count_unjoined()

    def _reader(self, path: Path, table: str, schema: pa.Schema) -> SqlDumpReader:
        return SqlDumpReader(path, table=table, columns=schema, skip_bad=self.skip_bad)

    def _progress(self, reader: SqlDumpReader, label: str) -> Iterator[pa.RecordBatch]:
        with Progress(None, label, "rows", enabled=self.progress is not False) as bar:
            for batch in reader:
                bar.update(batch.num_rows)
                yield batch

    @staticmethod
    def _write(
        path: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch], row_group: int = 1_000_000
    ) -> int:
        """Stream batches (one per INSERT statement, ~10k rows) into row groups of ~1M rows."""
        rows = 0
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        with pq.ParquetWriter(path, schema) as writer:
            for batch in batches:
                if not batch.num_rows:
                    continue
                pending.append(batch.cast(schema) if batch.schema != schema else batch)
                pending_rows += batch.num_rows
                rows += batch.num_rows
                if pending_rows >= row_group:
                    writer.write_table(
                        pa.Table.from_batches(pending, schema=schema), row_group_size=row_group
                    )
                    pending, pending_rows = [], 0
            if pending:
                writer.write_table(pa.Table.from_batches(pending, schema=schema), row_group_size=row_group)
        return rows

    # -- joins ------------------------------------------------------------------------------
    def _connect(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        con.execute(f"SET memory_limit = '{self.memory_limit}'")
        con.execute(f"SET threads = {int(self.threads)}")
        con.execute(f"SET temp_directory = '{self._tmp}'")
        return con

    def _links_sql(self) -> str:
        if self.stats.schema == "cl_to":
            return f"SELECT cl_from, category, kind FROM read_parquet('{self._path('links')}')"
        return (
            f"SELECT l.cl_from, t.category, l.kind FROM read_parquet('{self._path('links')}') l "
            f"JOIN read_parquet('{self._path('linktarget')}') t ON t.lt_id = l.cl_target_id"
        )

    def _count_unjoined(self) -> None:
        with self._connect() as con:
            if self.stats.schema == "cl_target_id":
                self.stats.links_unknown_target = con.execute(
                    f"SELECT count(*) FROM read_parquet('{self._path('links')}') l "
                    f"ANTI JOIN read_parquet('{self._path('linktarget')}') t ON t.lt_id = l.cl_target_id"
                ).fetchone()[0]
            self.stats.links_dangling = con.execute(
                f"SELECT count(*) FROM ({self._links_sql()}) l "
                f"ANTI JOIN read_parquet('{self._path('page')}') p ON p.page_id = l.cl_from"
            ).fetchone()[0]
            self.stats.articles, self.stats.redirects = con.execute(
                f"SELECT count(*) FILTER (WHERE NOT is_redirect), count(*) FILTER (WHERE is_redirect) "
                f"FROM read_parquet('{self._path('page')}') WHERE namespace = 0"
            ).fetchone()
            if self.redirect is not None:
                self.stats.redirect_targets = con.execute(
                    f"SELECT count(*) FROM read_parquet('{self._path('page')}') p "
                    f"JOIN read_parquet('{self._path('redirect')}') r ON r.rd_from = p.page_id "
                    "WHERE p.is_redirect AND p.namespace IN (0, 14)"
                ).fetchone()[0]

    def category_links(self) -> Iterator[pa.RecordBatch]:
        """`category_links` rows (CATEGORY_LINK_SCHEMA), ordered by page id then category.

        Category pages get their full title ("Category:Foo"), as in the XML ingest.
        """
        sql = (
            "SELECT p.page_id, "
            "CASE WHEN p.namespace = 14 THEN 'Category:' || p.title ELSE p.title END AS title, "
            "p.namespace, l.category, l.kind "
            f"FROM ({self._links_sql()}) l JOIN read_parquet('{self._path('page')}') p ON p.page_id = l.cl_from "
            "ORDER BY p.page_id, l.category"
        )
        yield from self._stream(sql, CATEGORY_LINK_SCHEMA)

    def articles(self) -> Iterator[pa.RecordBatch]:
        """`articles` rows (ARTICLE_SCHEMA) for the article and category pages, redirects flagged
        with their target ("Title#fragment", "Category:Name") when a redirect dump was given."""
        title = "CASE WHEN p.namespace = 14 THEN 'Category:' || p.title ELSE p.title END"
        if self.redirect is not None:
            target = "CASE WHEN p.is_redirect THEN r.target END"
            join = f"LEFT JOIN read_parquet('{self._path('redirect')}') r ON r.rd_from = p.page_id"
        else:
            target, join = "CAST(NULL AS VARCHAR)", ""
        sql = (
            f"SELECT p.page_id AS article_id, {title} AS title, p.namespace, p.is_redirect, {target} AS redirect_target "
            f"FROM read_parquet('{self._path('page')}') p {join} "
            "WHERE p.namespace IN (0, 14) ORDER BY p.page_id"
        )
        yield from self._stream(sql, ARTICLE_SCHEMA)

    def _stream(self, sql: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        with self._connect() as con:
            reader = con.sql(sql).to_arrow_reader(self.batch_rows)
            for batch in reader:
                yield batch.cast(schema) if batch.schema != schema else batch
