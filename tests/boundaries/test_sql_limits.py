"""`odqa sql` and `ws.sql` have a time and a memory bound, and run one statement at a time (issue 41)."""

from __future__ import annotations

import os
import time

import pytest
from click.testing import CliRunner

import odqa
from odqa.flows.cli import main
from odqa.storage import Workspace
from odqa.storage.catalog import ReadOnlyViolation

ENDLESS = "SELECT count(*) FROM range(1000000000000)"
GREEDY = "SELECT string_agg(repeat('x', 1000), ',') FROM range(1000000)"  # ~1 GB of text in one value


def _sql(ws: Workspace, *args: str):
    return CliRunner().invoke(main, ["-w", str(ws.root), "sql", *args])


def test_a_query_past_its_time_limit_is_stopped_naming_the_option(filled: Workspace) -> None:
    started = time.monotonic()
    result = _sql(filled, "--timeout", "0.5", ENDLESS)
    assert result.exit_code == 1, result.output
    assert "time limit of 0.5 s" in result.output and "--timeout SECONDS" in result.output
    assert time.monotonic() - started < 20
    from odqa.storage.catalog import QueryLimitError

    with pytest.raises(QueryLimitError, match=r"timeout_s="):
        odqa.open_workspace(filled.root).sql(ENDLESS, timeout_s=0.5)


def test_a_query_past_its_memory_limit_is_stopped_naming_the_option(filled: Workspace) -> None:
    result = _sql(filled, "--memory-limit", "64MB", GREEDY)
    assert result.exit_code == 1, result.output
    assert "memory limit of 64MB" in result.output and "--memory-limit SIZE" in result.output
    from odqa.storage.catalog import QueryLimitError

    with pytest.raises(QueryLimitError, match=r"memory_limit="):
        odqa.open_workspace(filled.root).sql(GREEDY, memory_limit="64MB")
    assert _sql(filled, "--memory-limit", "lots", "SELECT 1").exit_code == 2


def test_queries_run_within_default_bounds_they_cannot_raise(filled: Workspace) -> None:
    settings = filled.sql("SELECT current_setting('memory_limit') AS memory, current_setting('threads') AS threads"
                          ).to_pylist()[0]  # fmt: skip
    number, unit = settings["memory"].split()
    assert float(number) * {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit] <= 4 * 2**30, settings
    assert settings["threads"] <= max(1, (os.cpu_count() or 2) // 2)
    with pytest.raises(ReadOnlyViolation):
        filled.sql("SET memory_limit = '100GB'")
    from odqa.storage.catalog import QueryLimits

    within = filled.sql("SELECT count(*) AS n FROM passages", QueryLimits(timeout_s=30, memory_limit="256MB"))
    assert within.column("n").to_pylist() == [2]


def test_one_statement_at_a_time(filled: Workspace) -> None:
    with pytest.raises(ReadOnlyViolation, match="one statement at a time; got 2 .*SELECT 1; SELECT 2"):
        filled.sql("SELECT 1; SELECT 2")
    result = _sql(filled, "SELECT 1; SELECT 2")
    assert result.exit_code == 2 and "one statement at a time" in result.output, result.output
    assert filled.sql("SELECT 1 AS one;").column("one").to_pylist() == [1]  # a closing semicolon is one statement
