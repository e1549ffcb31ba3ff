"""`odqa sql`'s table prints values as they are: a string never as a number, a number with every
digit its type holds (DuckDB's own CLI prints the same)."""

from __future__ import annotations

from pathlib import Path

import duckdb
from click.testing import CliRunner

from odqa.flows.cli import main
from odqa.flows.cli.sql import render
from odqa.storage import Workspace

QUERY = ("SELECT '0.123456789' AS text, '1e3' AS exp, 1/3 AS third, 0.1::FLOAT AS single, 0.123456789 AS exact, "
         "12345678901234567890::HUGEINT // 10 AS big, 'nan'::DOUBLE AS nan, NULL::DOUBLE AS missing")  # fmt: skip


def _cells(table_text: str) -> list[str]:
    """The value row of a one-row table (columns are at least two spaces apart)."""
    return table_text.splitlines()[2].split()


def test_strings_print_as_they_are_and_numbers_keep_their_digits() -> None:
    cells = _cells(render(duckdb.sql(QUERY).to_arrow_table(), "table"))
    assert cells == ["0.123456789", "1e3", "0.3333333333333333", "0.1", "0.123456789", "1234567890123456789", "nan"]
    # numbers stay right-aligned and text left-aligned, as tabulate aligned them when it parsed numbers
    pairs = duckdb.sql("SELECT * FROM (VALUES ('0.5', 1.5::DOUBLE), ('0.123456789', 10.123456789)) t(s, x)")
    lines = render(pairs.to_arrow_table(), "table").splitlines()
    assert lines[2].startswith("0.5 ") and lines[2].endswith(" 1.5")
    assert lines[3].startswith("0.123456789") and lines[3].endswith("10.123456789")


def test_the_sql_verb_prints_the_same(tmp_path: Path) -> None:
    ws = Workspace.resolve(tmp_path / "ws")
    result = CliRunner().invoke(main, ["-w", str(ws.root), "sql", "SELECT '0.123456789' AS s, 2/3 AS d"])
    assert result.exit_code == 0, result.output
    assert _cells(result.output) == ["0.123456789", "0.6666666666666666"]
