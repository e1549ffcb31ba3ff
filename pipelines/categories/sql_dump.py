"""Streaming reader for mysqldump files (`page.sql.gz`, `categorylinks.sql.gz`, `linktarget.sql.gz`).

Wikimedia's SQL dumps put a whole table on a few lines of `INSERT INTO `t` VALUES (...),(...);`,
each line up to hundreds of megabytes, and categorylinks alone holds 100M+ rows. So the file is
read in binary chunks and every chunk's complete tuples come out as one Arrow record batch:
memory stays at one chunk plus the longest single row, never a whole line.

Why vectorized: a per-row Python loop (regex match + conversion) tops out near 0.1-0.5M rows/s,
i.e. most of an hour for categorylinks. Here a chunk is scanned with numpy: backslash runs give the
escaped characters, the parity of unescaped quotes tells which `( ) , ;` are structural, the
structural characters must repeat as `(` `,`x(n-1) `)` `,|;` per tuple (anything else is a corrupt
tuple, reported with its byte offset), and each requested column is cut out of the chunk as an
Arrow binary array with escapes translated, then cast (UTF-8 validated / parsed as numbers) in C++.

Byte offsets in errors are offsets in the *uncompressed* SQL text (`zcat FILE | tail -c +N`).
Raw newlines never occur inside mysqldump strings (they are written as `\\n`), so a newline always
ends the current statement's line: that is how a truncated chunk is told from a corrupt statement.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["DumpStats", "SqlDumpError", "SqlDumpReader", "dump_columns", "mysql_type_to_arrow"]

_INSERT_HEADER = re.compile(
    rb"INSERT\s+(?:IGNORE\s+)?INTO\s+`?([^`\s(]+)`?\s*(?:\(([^)]*)\))?\s*VALUES\s*", re.S
)
_CREATE_TABLE = re.compile(rb"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?`?([^`\s(]+)`?\s*\(", re.S)
_COLUMN_DEF = re.compile(rb"^\s*`([^`]+)`\s+([A-Za-z]+)", re.M)

_QUOTE, _BACKSLASH, _LPAREN, _RPAREN, _COMMA, _SEMI = 39, 92, 40, 41, 44, 59
# What `\x` means inside a MySQL string; any other escaped byte stands for itself.
_UNESCAPE = np.arange(256, dtype=np.uint8)
for _src, _dst in {b"0": 0, b"n": 10, b"r": 13, b"t": 9, b"b": 8, b"Z": 26}.items():
    _UNESCAPE[_src[0]] = _dst
# MySQL keeps the backslash of \% and \_ (they are LIKE-pattern escapes).
_KEEP_BACKSLASH_BEFORE = np.zeros(256, dtype=bool)
_KEEP_BACKSLASH_BEFORE[[ord("%"), ord("_")]] = True
_MAX_INTRODUCER = 16  # `_utf8mb4 '` and friends
_NULL = np.frombuffer(b"NULL", dtype=np.uint8)

_INT_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "bit", "year"}
_FLOAT_TYPES = {"float", "double", "real", "decimal", "numeric"}


def mysql_type_to_arrow(mysql_type: str) -> pa.DataType:
    """Default Arrow type of a column: integers, floats, else UTF-8 text (MediaWiki stores titles
    in varbinary columns, so binary types decode as text too; ask for pa.binary() to keep bytes)."""
    t = mysql_type.lower()
    if t in _INT_TYPES:
        return pa.int64()
    if t in _FLOAT_TYPES:
        return pa.float64()
    if t in {"blob", "tinyblob", "mediumblob", "longblob"}:
        return pa.binary()
    return pa.string()


class SqlDumpError(ValueError):
    """Malformed dump: names the file and the byte offset (uncompressed) where parsing failed."""

    def __init__(self, path: str | Path, offset: int, message: str) -> None:
        self.path = str(path)
        self.offset = offset
        self.detail = message
        super().__init__(f"{path}: byte {offset}: {message}")


@dataclass
class DumpStats:
    """What a pass over a dump saw; skipped items are counted, never silently dropped."""

    rows: int = 0
    statements: int = 0
    skipped_statements: int = 0
    skipped_rows: int = 0
    bad_offsets: list[int] = field(default_factory=list)  # the first few, for the report

    def record_bad(self, offset: int) -> None:
        if len(self.bad_offsets) < 20:
            self.bad_offsets.append(offset)


def _open(path: Path) -> BinaryIO:
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def dump_columns(path: str | Path, table: str) -> list[str] | None:
    """Column names of `CREATE TABLE `table`` in the dump, read without touching the data
    (stops at the first INSERT; None if the table is not created before it). Lets a caller pick
    between schema versions (e.g. categorylinks' `cl_to` vs `cl_target_id`) before parsing."""
    with _open(Path(path)) as fh:
        statement: bytes | None = None
        while True:
            line = fh.readline(1 << 16)  # bounded: a data line may be hundreds of megabytes
            if not line or (statement is None and line.startswith(b"INSERT")):
                return None
            if statement is None and line.startswith(b"CREATE"):
                statement = b""
            if statement is not None:
                statement += line
                if line.rstrip().endswith(b";"):
                    m = _CREATE_TABLE.match(statement)
                    if m is not None and m.group(1).decode("utf-8") == table:
                        return [c.decode("utf-8") for c, _ in _COLUMN_DEF.findall(statement, m.end())]
                    statement = None


@dataclass
class _Scan:
    """Result of scanning one line segment: `k` complete, well-formed tuples whose structural
    positions are `positions` (k x (n+2)); `ended` when the k-th tuple closed the statement;
    `bad_at` (relative offset) when a malformed tuple follows them. Escapes are sorted position
    arrays (they are rare); quotes are a running count, so "how many live quotes before byte p"
    is one lookup for any number of positions."""

    k: int
    positions: np.ndarray
    ended: bool
    bad_at: int | None
    escapers: np.ndarray  # backslashes that escape the next byte
    escaped: np.ndarray  # positions of the bytes they escape
    quote_count: np.ndarray  # uint16 running count (mod 2**16) of live quotes up to each byte


def _escapes(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted positions of (escaping backslashes, escaped bytes).

    In a run of backslashes every other one, counted from the run's start, escapes the next byte.
    """
    idx = np.flatnonzero(a == _BACKSLASH)
    if not len(idx):
        return idx, idx
    run_start = np.ones(len(idx), dtype=bool)
    run_start[1:] = idx[1:] != idx[:-1] + 1
    first_of_run = np.maximum.accumulate(np.where(run_start, idx, 0))
    escapers = idx[((idx - first_of_run) & 1) == 0]
    escaped = escapers + 1
    return escapers, escaped[escaped < len(a)]


def _sorted_isin(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """np.isin for a sorted `sorted_set`, by binary search (no hash table, no sort of `values`)."""
    if not len(sorted_set):
        return np.zeros(len(values), dtype=bool)
    j = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[j] == values


def _quote_count(a: np.ndarray, escaped: np.ndarray) -> np.ndarray:
    """Running count (uint16, wrapping) of the quotes that open or close strings, up to each byte.

    One pass over the chunk answers every "inside a string?" question by lookup; binary searches
    into the quote positions cost more once there are millions of fields per chunk.
    """
    live = a == _QUOTE
    if len(escaped):
        live[escaped] = False
    return np.cumsum(live, dtype=np.uint16)


def _outside(quote_count: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Mask of (non-quote) `positions` not inside a quoted string: an even count before them."""
    return (quote_count[positions] & 1) == 0


def _fields_ok(a: np.ndarray, quote_count: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Per field of each complete tuple: a whole quoted string (`'...'` or `_binary '...'`) or a
    non-empty bare token without quotes (NULL, a number). Catches `'x' junk` and `(1,,2)`, which
    the structural characters alone do not."""
    ts = pos[:, :-2] + 1
    te = pos[:, 1:-1]
    first = a[np.minimum(ts, len(a) - 1)]
    last = a[te - 1]
    live = quote_count[te - 1] - quote_count[ts - 1]  # live quotes in [ts, te), mod 2**16
    quoted = (live == 2) & (last == _QUOTE) & ((first == _QUOTE) | (first == ord("_")))
    bare = (live == 0) & (te > ts)
    return (quoted | bare).all(axis=1)


def _scan(a: np.ndarray, n_columns: int) -> _Scan:
    """Find the complete tuples at the start of `a` (which begins at a tuple's `(`)."""
    escapers, escaped = _escapes(a)
    quote_count = _quote_count(a, escaped)
    cand = np.flatnonzero((a == _LPAREN) | (a == _RPAREN) | (a == _COMMA) | (a == _SEMI))
    cand = cand[_outside(quote_count, cand)]
    codes = a[cand]
    semis = np.flatnonzero(codes == _SEMI)
    if len(semis):
        cand = cand[: semis[0] + 1]
        codes = codes[: semis[0] + 1]

    w = n_columns + 2
    complete = len(codes) // w
    pattern = np.full(w, _COMMA, dtype=np.uint8)
    pattern[0], pattern[n_columns] = _LPAREN, _RPAREN
    # Complete tuples, one per row: the structural characters must read `(` `,`... `)` `,|;`, the
    # separator must follow `)` directly and the next `(` the separator.
    pos = cand[: complete * w].reshape(complete, w)
    code = codes[: complete * w].reshape(complete, w)
    ok = code == pattern
    ok[:, -1] |= code[:, -1] == _SEMI
    ok[:, -1] &= pos[:, -1] == pos[:, -2] + 1
    ok[1:, 0] &= pos[1:, 0] == pos[:-1, -1] + 1
    if complete:
        ok[0, 0] &= pos[0, 0] == 0
    row_ok = ok.all(axis=1) & _fields_ok(a, quote_count, pos)
    # The incomplete tail must be a prefix of a well-formed tuple.
    tail_pos, tail_code = cand[complete * w :], codes[complete * w :]
    tail_ok = bool((tail_code == pattern[: len(tail_code)]).all())
    if len(tail_pos):
        tail_ok &= int(tail_pos[0]) == (int(pos[-1, -1]) + 1 if complete else 0)
    if not row_ok.all():
        k = int(np.argmin(row_ok))
    elif not tail_ok:
        k = complete
    else:
        ended = len(semis) > 0 and not len(tail_pos)
        return _Scan(complete, pos, ended, None, escapers, escaped, quote_count)
    bad_at = int(pos[k - 1, -1]) + 1 if k else 0  # where the bad tuple should start
    return _Scan(k, pos[:k], False, bad_at, escapers, escaped, quote_count)


def _column(a: np.ndarray, scan: _Scan, j: int) -> pa.Array:
    """Cut column `j` out of the scanned (already validated) tuples as a binary array: quotes
    and charset introducers (`_binary '...'`) removed, escapes translated, NULL as null."""
    ts = scan.positions[:, j] + 1
    te = scan.positions[:, j + 1]
    n = len(ts)
    first = a[np.minimum(ts, len(a) - 1)]
    is_null = te - ts == 4
    if is_null.any():
        head = a[np.minimum(ts[:, None] + np.arange(4), len(a) - 1)]
        is_null &= (head == _NULL).all(axis=1)
    quoted = first == _QUOTE
    intro = first == ord("_")
    cs = np.where(quoted, ts + 1, ts)
    if intro.any():
        # Charset introducers are short (`_binary '`, `_utf8mb4'`): the string starts after the
        # first quote within the token's first bytes.
        head = a[np.minimum(ts[intro][:, None] + np.arange(_MAX_INTRODUCER), len(a) - 1)]
        cs[intro] = ts[intro] + np.argmax(head == _QUOTE, axis=1) + 1
    ce = np.where(quoted | intro, te - 1, te)
    lengths = np.where(is_null, 0, ce - cs)

    # Gather index of every content byte: row r covers cs[r] .. cs[r]+lengths[r]-1.
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if n else 0
    idx = np.arange(total, dtype=np.int64) + np.repeat(cs - (ends - lengths), lengths)
    escapes_in_row = (
        np.searchsorted(scan.escapers, ce) - np.searchsorted(scan.escapers, cs)
        if len(scan.escapers)
        else None
    )
    if escapes_in_row is not None and escapes_in_row.any():
        # Escaping backslashes vanish (except before % and _), the escaped byte is translated;
        # only the bytes of rows that hold an escape are looked up.
        in_escaped_row = np.repeat(escapes_in_row > 0, lengths)
        sel = idx[in_escaped_row]
        drops = scan.escapers[~_KEEP_BACKSLASH_BEFORE[a[np.minimum(scan.escapers + 1, len(a) - 1)]]]
        dropped = np.zeros(total, dtype=bool)
        dropped[in_escaped_row] = _sorted_isin(sel, drops)
        translated = np.zeros(total, dtype=bool)
        translated[in_escaped_row] = _sorted_isin(sel, scan.escaped)
        data = a[idx]
        data[translated] = _UNESCAPE[data[translated]]
        if dropped.any():
            rows = np.repeat(np.arange(n), lengths)
            lengths = lengths - np.bincount(rows[dropped], minlength=n)
            data = data[~dropped]
            ends = np.cumsum(lengths)
    else:
        data = a[idx]
    offsets = np.concatenate(([0], ends)).astype(np.int64)
    validity = pa.py_buffer(np.packbits(~is_null, bitorder="little")) if is_null.any() else None
    arr = pa.Array.from_buffers(
        pa.large_binary(),
        n,
        [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=int(is_null.sum()),
    )
    return arr


class SqlDumpReader:
    """Iterate one table of a mysqldump file as Arrow record batches of the requested columns.

    `columns`: a pa.Schema (names + target types), a list of names (types from CREATE TABLE via
    `mysql_type_to_arrow`), or None for every column. `table` restricts to one table's INSERTs
    (None: the table of the first INSERT; INSERTs of other tables are skipped). With `skip_bad`, a
    corrupt statement is skipped from the bad tuple to the end of its line (parsing resumes at the
    next `INSERT INTO`), and a row whose requested value is invalid (bad UTF-8, not a number) is
    dropped; both are counted in `stats`. Without it both raise `SqlDumpError` with the offset.
    Rows before the bad spot have already been yielded and stay valid.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        table: str | None = None,
        columns: pa.Schema | Sequence[str] | None = None,
        skip_bad: bool = False,
        chunk_size: int = 16 << 20,
        max_row_bytes: int = 256 << 20,
    ) -> None:
        self.path = Path(path)
        self.table = table
        self.columns = columns
        self.skip_bad = skip_bad
        self.chunk_size = chunk_size
        self.max_row_bytes = max_row_bytes
        self.stats = DumpStats()
        self.table_columns: dict[str, list[str]] = {}  # from CREATE TABLE, in order
        self.column_types: dict[str, dict[str, str]] = {}

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """Row tuples (for small dumps and tests; large ones should consume batches)."""
        for batch in self:
            yield from zip(*(c.to_pylist() for c in batch.columns), strict=True)

    # -- buffer management ------------------------------------------------------------------
    def _fill(self) -> bool:
        """Drop the consumed prefix and append one chunk; False at end of file."""
        if self._pos:
            self._base += self._pos
            self._buf = self._buf[self._pos :]
            self._pos = 0
        try:
            chunk = self._fh.read(self.chunk_size)
        except (EOFError, OSError, zlib.error) as exc:  # truncated or corrupt gzip stream
            raise SqlDumpError(
                self.path, self._base + len(self._buf), f"cannot read the file: {exc}"
            ) from None
        if not chunk:
            self._eof = True
            return False
        self._buf += chunk
        return True

    def _skip_line(self) -> None:
        """Advance past the next newline without keeping the skipped bytes (bounded memory)."""
        while True:
            nl = self._buf.find(b"\n", self._pos)
            if nl >= 0:
                self._pos = nl + 1
                return
            self._pos = len(self._buf)
            if not self._fill():
                return

    def _bad_statement(self, offset: int, message: str) -> None:
        if not self.skip_bad:
            raise SqlDumpError(self.path, offset, message)
        self.stats.skipped_statements += 1
        self.stats.record_bad(offset)
        self._skip_line()

    # -- statements ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[pa.RecordBatch]:
        self._buf = b""
        self._pos = 0
        self._base = 0
        self._eof = False
        with _open(self.path) as fh:
            self._fh = fh
            while True:
                while len(self._buf) - self._pos < 4096 and not self._eof:
                    self._fill()
                buf, pos = self._buf, self._pos
                while pos < len(buf) and buf[pos] in b" \t\r\n":
                    pos += 1
                self._pos = pos
                if pos >= len(buf):
                    if self._eof:
                        return
                    continue
                if buf.startswith(b"INSERT", pos):
                    yield from self._insert()
                elif buf.startswith(b"CREATE", pos):
                    self._create_table()
                else:
                    self._skip_line()

    def _create_table(self) -> None:
        while True:
            end = self._buf.find(b";\n", self._pos)
            if end >= 0 or self._eof:
                break
            if len(self._buf) - self._pos > self.max_row_bytes:
                raise SqlDumpError(self.path, self._base + self._pos, "unterminated CREATE statement")
            self._fill()
        end = len(self._buf) if end < 0 else end
        statement = self._buf[self._pos : end]
        m = _CREATE_TABLE.match(statement)
        if m is not None:
            name = m.group(1).decode("utf-8")
            defs = _COLUMN_DEF.findall(statement, m.end())
            self.table_columns[name] = [c.decode("utf-8") for c, _ in defs]
            self.column_types[name] = {c.decode("utf-8"): t.decode("ascii").lower() for c, t in defs}
        self._pos = min(end + 2, len(self._buf))

    def _insert(self) -> Iterator[pa.RecordBatch]:
        header_offset = self._base + self._pos
        while True:  # the header is short, but may straddle a chunk boundary
            header = _INSERT_HEADER.match(self._buf, self._pos)
            if header is not None and header.end() < len(self._buf):
                break
            if self._eof or self._buf.find(b"\n", self._pos) >= 0:
                self._bad_statement(header_offset, "expected `INSERT INTO `table` VALUES (`")
                return
            self._fill()
        name = header.group(1).decode("utf-8")
        if self.table is None:
            self.table = name
        if name != self.table:
            self._skip_line()
            return
        if header.group(2) is not None:
            names = [c.strip().strip(b"`").decode("utf-8") for c in header.group(2).split(b",")]
        else:
            names = self.table_columns.get(name)
        self._pos = header.end()
        self.stats.statements += 1
        if names is None:
            if self.columns is not None:
                raise SqlDumpError(
                    self.path,
                    header_offset,
                    f"columns requested but the dump has no CREATE TABLE `{name}` and the INSERT names none",
                )
            names = [f"c{i}" for i in range(self._count_fields())]
        wanted, schema = self._resolve(name, names, header_offset)
        yield from self._values(len(names), wanted, schema)

    def _count_fields(self) -> int:
        """Column count from the first tuple, for dumps without CREATE TABLE or column list."""
        while True:
            nl = self._buf.find(b"\n", self._pos)
            end = nl if nl >= 0 else len(self._buf)
            seg = np.frombuffer(self._buf, dtype=np.uint8, count=end - self._pos, offset=self._pos)
            quote_count = _quote_count(seg, _escapes(seg)[1])
            close = np.flatnonzero(seg == _RPAREN)
            close = close[_outside(quote_count, close)]
            if len(close):
                commas = np.flatnonzero(seg[: close[0]] == _COMMA)
                return 1 + int(_outside(quote_count, commas).sum())
            if nl >= 0 or self._eof:
                raise SqlDumpError(self.path, self._base + self._pos, "expected a VALUES tuple `(...)`")
            self._fill()

    def _resolve(self, table: str, names: list[str], offset: int) -> tuple[list[int], pa.Schema]:
        types = self.column_types.get(table, {})
        if self.columns is None:
            fields = [pa.field(c, mysql_type_to_arrow(types.get(c, "varchar"))) for c in names]
        elif isinstance(self.columns, pa.Schema):
            fields = list(self.columns)
        else:
            fields = [pa.field(c, mysql_type_to_arrow(types.get(c, "varchar"))) for c in self.columns]
        missing = [f.name for f in fields if f.name not in names]
        if missing:
            raise SqlDumpError(
                self.path, offset, f"table `{table}` has no column(s) {missing}; it has {names}"
            )
        return [names.index(f.name) for f in fields], pa.schema(fields)

    def _values(self, n_columns: int, wanted: list[int], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        while True:
            buf, start = self._buf, self._pos
            nl = buf.find(b"\n", start)
            line_complete = nl >= 0 or self._eof
            end = nl if nl >= 0 else len(buf)
            a = np.frombuffer(buf, dtype=np.uint8, count=end - start, offset=start)
            scan = _scan(a, n_columns)
            if scan.k:
                batch = self._batch(a, scan, wanted, schema, start)
                if batch.num_rows:
                    yield batch
                consumed = int(scan.positions[-1, -1]) + 1
            else:
                consumed = 0
            self._pos = start + consumed
            if scan.ended:
                return
            if scan.bad_at is not None:
                self._bad_statement(
                    self._base + start + scan.bad_at, f"malformed VALUES tuple (expected {n_columns} fields)"
                )
                return
            if line_complete:
                self._bad_statement(self._base + self._pos, "statement ends without `;` (truncated tuple)")
                return
            if end - self._pos > self.max_row_bytes:
                raise SqlDumpError(
                    self.path, self._base + self._pos, f"a row longer than {self.max_row_bytes} bytes"
                )
            self._fill()

    def _batch(
        self, a: np.ndarray, scan: _Scan, wanted: list[int], schema: pa.Schema, start: int
    ) -> pa.RecordBatch:
        good = np.ones(scan.k, dtype=bool)
        arrays = [
            self._cast(_column(a, scan, j), fld, scan, j, start, good)
            for j, fld in zip(wanted, schema, strict=True)
        ]
        bad_rows = np.flatnonzero(~good)  # only with skip_bad: otherwise _cast raised
        if len(bad_rows):
            for r in bad_rows[:20]:
                self.stats.record_bad(self._base + start + int(scan.positions[r, 0]))
            self.stats.skipped_rows += len(bad_rows)
            mask = pa.array(good)
            arrays = [pc.filter(arr, mask) for arr in arrays]
        self.stats.rows += scan.k - len(bad_rows)
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _cast(
        self, raw: pa.Array, fld: pa.Field, scan: _Scan, j: int, start: int, good: np.ndarray
    ) -> pa.Array:
        """Cast to the field's type; a value that does not convert marks its row bad (`good`)."""
        if pa.types.is_large_binary(fld.type):
            return raw
        if pa.types.is_binary(fld.type):
            return raw.cast(pa.binary())
        try:
            text = raw.cast(pa.large_string())
            return text.cast(fld.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        # Find the offending rows one by one (only on the error path).
        values = raw.to_pylist()
        out = []
        for r, value in enumerate(values):
            try:
                if value is None:
                    out.append(None)
                    continue
                text_value = value.decode("utf-8")
                out.append(pa.array([text_value], pa.large_string()).cast(fld.type)[0].as_py())
            except (UnicodeDecodeError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                if not self.skip_bad:
                    offset = self._base + start + int(scan.positions[r, j]) + 1
                    what = "invalid UTF-8" if isinstance(exc, UnicodeDecodeError) else f"not a {fld.type}"
                    raise SqlDumpError(
                        self.path, offset, f"column `{fld.name}`: {what}: {value[:60]!r}"
                    ) from None
                good[r] = False
                out.append(None)
        return pa.array(out, type=fld.type)
