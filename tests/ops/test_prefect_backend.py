"""The project's Prefect backend under the load that froze SQLite: a flow of 40 subflows whose
tasks carry a tag with a concurrency limit (task-run writes and slot updates racing the
state-setting transactions), run against the session's server on the local PostgreSQL. Its log
must hold no "database is locked" and no "Error flushing" (the task-run recorder's retry).
Also: the cluster listens on its Unix socket only, and the SQLite fallback says why and what it
costs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from odqa.flows.backend.local_server import TemporaryServer

from .backend_load import STAGES, TASKS_PER_STAGE, forty_stages, set_limit


def _require_postgres(server: TemporaryServer) -> None:
    if server.database.kind == "sqlite":
        pytest.skip(f"PostgreSQL cannot be had here: {server.database.note}")


async def _runs_of(flow_name: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    async with get_client() as client:
        return await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
                                           sort=FlowRunSort.ID_DESC, limit=200, offset=0)  # fmt: skip


def test_forty_subflows_with_tagged_tasks_leave_no_lock_errors(prefect_server: TemporaryServer) -> None:
    _require_postgres(prefect_server)
    asyncio.run(set_limit(STAGES * TASKS_PER_STAGE))  # every task takes and frees a slot, none waits
    expected = sum(range(STAGES * TASKS_PER_STAGE))
    assert asyncio.run(forty_stages()) == expected
    stages = asyncio.run(_runs_of("backend-stage"))
    assert len(stages) >= STAGES and all(run.state_name == "Completed" for run in stages)
    log = prefect_server.log.read_text(encoding="utf-8", errors="replace")
    assert "database is locked" not in log, log[-3000:]
    assert "Error flushing" not in log, log[-3000:]


def test_the_cluster_listens_on_its_socket_only(prefect_server: TemporaryServer) -> None:
    _require_postgres(prefect_server)
    cluster = prefect_server.database.cluster
    if cluster is None:
        pytest.skip("the session's server uses a configured database, not the local cluster")
    assert cluster.psql("SHOW listen_addresses") == ""
    socket_dir = Path(cluster.psql("SHOW unix_socket_directories"))
    assert socket_dir == cluster.socket_dir and (socket_dir / ".s.PGSQL.5432").is_socket()
    assert (socket_dir.stat().st_mode & 0o777) == 0o700
    assert cluster.psql("SELECT extname FROM pg_extension WHERE extname = 'pg_trgm'",
                        database=prefect_server.database.name) == "pg_trgm"  # fmt: skip


def test_without_postgresql_the_server_falls_back_to_sqlite_and_says_so(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from odqa.flows.backend.database import SQLITE_COST, prefect_database

    monkeypatch.setenv("ODQA_POSTGRES_DIR", str(tmp_path / "cluster"))
    monkeypatch.setenv("ODQA_POSTGRES_BIN", str(tmp_path / "no-postgres-here"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no pg_ctl on PATH either
    monkeypatch.setattr("odqa.flows.backend.postgres.DEBIAN_LIB", tmp_path / "no-debian-packages")
    for name in ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL",
                 "ODQA_PREFECT_BACKEND"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    database = prefect_database("odqa_ws_unused", tmp_path / "prefect.db")
    assert database.kind == "sqlite" and database.url == f"sqlite+aiosqlite:///{tmp_path / 'prefect.db'}"
    assert database.note is not None and "PostgreSQL unavailable (PostgreSQL is not installed" in database.note
    assert SQLITE_COST in database.note and "\n" not in database.note
