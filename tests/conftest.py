"""Shared test fixtures: workspaces, the bundled sample, the real shared data, Prefect."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from odqa.flows.backend.local_server import TemporaryServer

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO_ROOT / "sample"
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One OpenMP thread per process (torch, FAISS), set before either is imported: the xdist
# workers and the processes they start already keep every core busy, and OpenMP threads of
# processes side by side spin-wait against each other. Measured with two copies of
# tests/experiments/test_experiments.py side by side on 2 cores: 140 -> 100 CPU-s and 297 -> 216 s
# each. (Tests of thread settings set theirs explicitly.)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENAI_API_KEY", "placeholder-not-used")
# Flows in tests run against the session's server (`prefect_server`, on the project's backend),
# never a temporary SQLite server Prefect would otherwise start for a flow run without one.
os.environ.setdefault("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "false")
# The servers tests start run their periodic services every 60 s (Prefect's defaults: cleanup
# reconciler 5 s, cancellation cleanup 20 s, repossessor 15 s); no test waits on one of them. A
# new or changed deployment's schedule still gets its runs within ~5 s: the scheduler's
# recent-deployments loop keeps its 5 s (tests/boundaries/test_reindex_on_schedule.py,
# test_watch_schedule.py). Measured on an idle test server: 1.65 -> 1.03 CPU-s a minute, over the
# ~110 server-minutes of a suite.
for _service in ("CLEANUP_RECONCILER", "CANCELLATION_CLEANUP", "REPOSSESSOR"):
    os.environ.setdefault(f"PREFECT_SERVER_SERVICES_{_service}_LOOP_SECONDS", "60")
# They evaluate no automations (odqa makes none; a user's server keeps them): the triggers
# service reads every event of every run, ~17% of a server's CPU over small flow runs.
os.environ.setdefault("PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED", "false")
# Nor do they run the services no test exercises (marking runs Late, expiring pauses, logging every
# event, the foreman's worker and deployment status): an idle test server's minute 2.3 -> 2.0 CPU-s,
# over a suite of ~20 servers.
for _service in ("LATE_RUNS", "PAUSE_EXPIRATIONS", "EVENT_LOGGER", "FOREMAN"):
    os.environ.setdefault(f"PREFECT_SERVER_SERVICES_{_service}_ENABLED", "false")
# The machine's `gpu` slots are shared by every odqa process of the user; a test session (each
# pytest-xdist worker, another checkout's suite) takes its own, so one's trainings never make
# another's wait (tests/ops/test_concurrency_slots.py checks the sharing with a folder of its own).
os.environ.setdefault("ODQA_SLOT_DIR", str(Path(tempfile.gettempdir()) / f"odqa-test-slots-{os.getpid()}"))


#: The test files that take longest (`./run test --durations=150`, 2026-11-28), slowest first. The
#: xdist workers take whole files (`--dist loadfile`) in collection order, so these start first and
#: the short files fill in around them; collected last, one of them ran alone for the suite's last
#: half hour. A file missing from the list runs after them, in its usual order.
SLOW_FILES = (
    "tests/docs/test_readme.py",
    "tests/reproduce/test_reproduce_miniatures.py",
    "tests/ops/test_parallel_dense.py",
    "tests/ops/test_cli_terminal.py",
    "tests/ops/test_server_lifecycle.py",
    "tests/boundaries/test_watch_schedule.py",
    "tests/ops/test_pipeline.py",
    "tests/ops/test_long_runs.py",
    "tests/ops/test_deployments.py",
    "tests/ops/test_prefect_ui_project.py",
    "tests/dense/test_index_memory.py",
    "tests/serve/test_load.py",
    "tests/boundaries/test_reindex_soak.py",
    "tests/experiments/test_train_rounds.py",
    "tests/ops/test_prefect_backend.py",
    "tests/serve/test_python_api.py",
    "tests/ops/test_reindex.py",
    "tests/ops/test_long_lived_server.py",
    "tests/models/test_training_flow.py",
    "tests/boundaries/test_writers.py",
    "tests/evaluation/test_beir_evaluator.py",
    "tests/experiments/test_experiments.py",
    "tests/flows/test_ingest_wikipedia.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow files first (SLOW_FILES), the rest in their usual order (a stable sort)."""
    rank = {name: place for place, name in enumerate(SLOW_FILES)}

    def place(item: pytest.Item) -> int:
        return rank.get(Path(item.path).relative_to(REPO_ROOT).as_posix(), len(SLOW_FILES))

    items.sort(key=place)


def shared_data(*parts: str) -> Path:
    """A file of the real third-party data beside the repo; skips the test when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path


@pytest.fixture
def workspace(tmp_path: Path):
    """A fresh, empty workspace."""
    from odqa.storage import Workspace

    return Workspace.resolve(tmp_path / "ws")


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporaryServer]:
    """One Prefect server for the whole session (starting one costs ~10 s), on the project's
    backend: a database of its own in the local PostgreSQL (SQLite, saying so, where PostgreSQL
    cannot be had), dropped with the server at the end. Its output goes to `server.log` beside
    its PREFECT_HOME. `PREFECT_API_URL` names it for this process and its subprocesses."""
    from prefect.context import _temporary_global_settings_context, get_settings_context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from odqa.flows.backend.local_server import temporary_server

    home = tmp_path_factory.mktemp("prefect-server")
    cluster, started_cluster = _start_cluster()
    try:
        with temporary_server(home, home / "server.log", label="test", timeout=300) as server, \
                temporary_settings({PREFECT_API_URL: server.api_url}), \
                _temporary_global_settings_context(get_settings_context()):  # fmt: skip
            # (the global context too, as Prefect's own test harness does: threads the tests
            # start see it, not the settings of import time)
            previous = os.environ.get("PREFECT_API_URL")
            os.environ["PREFECT_API_URL"] = server.api_url
            try:
                yield server
            finally:
                _drain_prefect_workers()
                if previous is None:
                    os.environ.pop("PREFECT_API_URL", None)
                else:
                    os.environ["PREFECT_API_URL"] = previous
    finally:
        # The cluster is shared (other checkouts' servers may use it): stopped only when this
        # session started it and no database of it is in use anymore.
        if cluster is not None and started_cluster and not cluster.databases_in_use():
            cluster.stop()


def _start_cluster():
    """(the local PostgreSQL cluster, whether this call started it); (None, False) when the
    session's server will not use it (a configured database, SQLite, no PostgreSQL)."""
    from odqa.flows.backend.database import BACKEND_ENV, configured_url
    from odqa.flows.backend.postgres import PostgresUnavailable, local_cluster

    if configured_url() or os.environ.get(BACKEND_ENV, "").lower() == "sqlite":
        return None, False
    try:
        cluster = local_cluster()
        return cluster, cluster.ensure_running()
    except (PostgresUnavailable, RuntimeError, OSError):
        return None, False


def _drain_prefect_workers() -> None:
    """Send this process's queued run logs and events before the server goes (as Prefect's own
    test harness does), so none is posted to a stopped server."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain() -> None:
        for worker in (APILogWorker, EventsWorker):
            result = worker.drain_all()
            if inspect.isawaitable(result):
                await result

    run_coro_as_sync(drain())


@pytest.fixture(scope="session")
def prefect_harness(prefect_server: TemporaryServer) -> str:
    """The API URL of the session's Prefect server, for tests that start subprocesses."""
    return prefect_server.api_url


@pytest.fixture
def cli(prefect_harness: str):
    """Invoke `odqa` in-process (under the session's Prefect server); returns the click result."""
    from click.testing import CliRunner

    from odqa.flows.cli import main

    runner = CliRunner()

    def invoke(*args: str, ok: bool = True):
        result = runner.invoke(main, list(args), catch_exceptions=False)
        if ok and result.exit_code != 0:
            raise AssertionError(f"odqa {' '.join(args)} exited {result.exit_code}:\n{result.output}")
        return result

    return invoke


@pytest.fixture(scope="session")
def java() -> None:
    """A usable JDK for pyserini's BM25, else the test is skipped naming what is missing."""
    from odqa.pipelines.retrieval.java import JavaMissingError, check_java

    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"BM25 needs a JDK: {error}")
