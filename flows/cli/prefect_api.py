"""Which Prefect server a CLI call reports to, decided without importing Prefect.

In this order:

1. ``PREFECT_API_URL`` in the environment;
2. ``PREFECT_API_URL`` in the active Prefect profile (``$PREFECT_HOME/profiles.toml``);
3. the workspace's long-lived local server (`flows.backend.local_server`): a verb that runs
   flows starts it in the background when it is not running (and again when it died), so no call
   pays for Prefect's temporary server and every run stays visible in the UI; verbs that can
   answer without a server (``odqa search``, ``sql``, ``serve``, ``index plan``) use it only when
   it already runs. ``PREFECT_API_URL`` is then set for the call so the flows report to it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..backend.local_server import ServerStatus, ensure_server, running_server, stop_command


@dataclass(frozen=True)
class PrefectApi:
    """The server flow runs report to (``url`` None: none) and how it was found;
    ``needs_export``: the workspace's own server, so ``PREFECT_API_URL`` must be set for the flows;
    ``status``: what starting it took, when this call started it."""

    url: str | None
    source: str
    needs_export: bool = False
    status: ServerStatus | None = None

    def describe(self) -> str:
        if self.url is None:
            return "no Prefect server: answered without a flow run"
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


def configured_api() -> PrefectApi | None:
    """A server the user configured (steps 1 and 2 of the module docstring), if any."""
    if os.environ.get("PREFECT_API_URL"):
        return PrefectApi(os.environ["PREFECT_API_URL"], "PREFECT_API_URL")
    configured = profile_api_url()
    if configured:
        return PrefectApi(configured, "the active Prefect profile")
    return None


def choose_prefect_api(workspace: Path, start: bool) -> PrefectApi:
    """Find the server (see the module docstring); ``start``: the verb runs flows, so the
    workspace's server is started when it does not run."""
    configured = configured_api()
    if configured is not None:
        return configured
    if start:
        status = ensure_server(workspace)
        return PrefectApi(status.record.api_url, "this workspace's server", needs_export=True, status=status)
    record = running_server(workspace)
    if record is not None:
        return PrefectApi(record.api_url, "this workspace's server", needs_export=True)
    return PrefectApi(None, "none")


def server_lines(api: PrefectApi, workspace: Path) -> list[str]:
    """What the terminal is told when this call had to start (or mend) ``workspace``'s server."""
    status = api.status
    if status is None:
        return []
    lines = [status.note] if status.note else []  # a running server's: what had to be mended for it
    record = status.record
    if status.restarted_after is not None:
        lines.append(f"this workspace's Prefect server (pid {status.restarted_after}) had stopped; "
                     f"started it again at {record.ui_url}")  # fmt: skip
    elif status.started:
        lines.append(f"started this workspace's Prefect server in the background: UI {record.ui_url}, "
                     f"log {record.log}; `{stop_command(workspace)}` stops it")  # fmt: skip
    if status.watchdog_started is not None:
        lines.append(f"this workspace's Prefect server (pid {record.pid}) had no watchdog; started one "
                     f"(pid {status.watchdog_started}), which stops it when idle or when the workspace is gone")
    if status.crashed_runs:
        lines.append(f"marked {len(status.crashed_runs)} flow run(s) whose process is gone as Crashed: "
                     f"{', '.join(status.crashed_runs[:5])}{' ...' if len(status.crashed_runs) > 5 else ''}")
    return lines
