"""Shared test fixtures: workspaces, the bundled sample, the real shared data, Prefect."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO_ROOT / "sample"
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OPENAI_API_KEY", "placeholder-not-used")


def shared_data(*parts: str) -> Path:
    """A file of the real third-party data beside the repo; skips the test when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path


@pytest.fixture
def workspace(tmp_path: Path):
    """A fresh, empty workspace."""
    from storage import Workspace

    return Workspace.resolve(tmp_path / "ws")


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[str]:
    """One temporary Prefect server for the whole session (starting one costs ~10 s).

    Yields the API URL so tests that start subprocesses can point them at the same server.
    """
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


@pytest.fixture
def cli(prefect_harness: str):
    """Invoke `odqa` in-process (under the session's Prefect server); returns the click result."""
    from click.testing import CliRunner

    from flows.cli import main

    runner = CliRunner()

    def invoke(*args: str, ok: bool = True):
        result = runner.invoke(main, list(args), catch_exceptions=False)
        if ok and result.exit_code != 0:
            raise AssertionError(f"odqa {' '.join(args)} exited {result.exit_code}:\n{result.output}")
        return result

    return invoke
