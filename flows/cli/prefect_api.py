"""Which Prefect server a CLI call reports to, decided without importing Prefect.

Without a configured server every flow run starts a temporary one (seconds on an idle machine,
tens of seconds on a busy one). So the CLI looks, in this order, for:

1. ``PREFECT_API_URL`` in the environment;
2. ``PREFECT_API_URL`` in the active Prefect profile (``$PREFECT_HOME/profiles.toml``);
3. the server ``./run server`` starts (http://127.0.0.1:4200/api) answering its health check
   within ~0.2 s; when it does, ``PREFECT_API_URL`` is set for this call so the flows report to it.

Otherwise flow-running verbs fall back to Prefect's temporary server, and verbs that can answer
without one (``odqa search``) call their function directly instead of running a flow.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

LOCAL_SERVER = "http://127.0.0.1:4200/api"
HEALTH_TIMEOUT_S = 0.2


@dataclass(frozen=True)
class PrefectApi:
    """The server flow runs report to (``url`` None: none configured) and how it was found;
    ``needs_export``: found by probing, so ``PREFECT_API_URL`` must be set for the flows."""

    url: str | None
    source: str
    needs_export: bool = False

    def describe(self) -> str:
        if self.url is None:
            return "no Prefect server configured: flow runs start a temporary local server"
        return f"reporting flow runs to the Prefect server at {self.url} ({self.source})"


def profile_api_url() -> str | None:
    """``PREFECT_API_URL`` of the active profile in ``$PREFECT_HOME/profiles.toml``, if any."""
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        import tomllib
    except ImportError:  # Python 3.10: the `toml` package Prefect depends on
        import toml as tomllib  # type: ignore[no-redef]
    try:
        profiles = tomllib.loads(text)
    except ValueError:  # tomllib.TOMLDecodeError and toml.TomlDecodeError are ValueErrors
        return None
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    value = profiles.get("profiles", {}).get(active, {}).get("PREFECT_API_URL")
    return str(value) if value else None


def server_answers(url: str, timeout: float = HEALTH_TIMEOUT_S) -> bool:
    """Whether a Prefect server at ``url`` (an API URL) answers ``/health`` within ``timeout``."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def choose_prefect_api() -> PrefectApi:
    """Find the server (see the module docstring). The caller exports a found local server as
    ``PREFECT_API_URL`` so the flows of this call report to it."""
    if os.environ.get("PREFECT_API_URL"):
        return PrefectApi(os.environ["PREFECT_API_URL"], "PREFECT_API_URL")
    configured = profile_api_url()
    if configured:
        return PrefectApi(configured, "the active Prefect profile")
    if server_answers(LOCAL_SERVER):
        return PrefectApi(LOCAL_SERVER, "found ./run server", needs_export=True)
    return PrefectApi(None, "none")
