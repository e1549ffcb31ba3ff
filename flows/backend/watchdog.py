"""The watchdog beside a workspace's background Prefect server: it stops the server when the
workspace folder is gone or replaced by another at the same path (`local_server.workspace_gone`),
or when nothing has used the server for ``$ODQA_PREFECT_IDLE_S`` seconds (default 3600; 0 keeps
it running while its workspace exists). A server that does not stop within
``$ODQA_PREFECT_STOP_TIMEOUT`` seconds of SIGTERM (default 30) is killed with its process group.

Without it every server the CLI started in the background waited forever: an afternoon of verbs in
temporary workspaces left 22 servers (5.3 GB of RSS), 18 of them for folders that no longer
existed. `flows.backend.local_server.ensure_server` starts one watchdog per server, detached like
the server, as ``python -m odqa.flows.backend.watchdog SERVER_PID WORKSPACE PORT``. It checks every
``$ODQA_PREFECT_WATCH_S`` seconds (default 30), the first time at once, and exits only once the
server's process is gone: a check that fails (a file of the workspace it cannot read, a lock it
cannot take) is logged and the watch goes on; so is a malformed ``$ODQA_UMASK``. A watchdog that was killed anyway is replaced by the
next `ensure_server`, `odqa server status` or `odqa server list` (`local_server.ensure_watchdog`).

It creates nothing in the workspace: once the folder is gone it only stops the server, and the
idle stop's lock needs the folder to exist (`local_server.stop_server`).

The server is busy, so not idle, while any of these holds:

- an odqa call that reports to it runs (``prefect/clients/``), or one started it less than the
  idle time ago (``prefect/last-used``, touched by every `ensure_server`);
- `./run server` runs for the workspace (``prefect/foreground.json``: its worker serves the UI's
  deployments and schedules);
- a flow run is Pending, Running or Cancelling on it.

Browsing the UI alone does not count: with no `./run server` running, a UI left open over an
idle hour finds the server stopped (the next odqa verb, or `./run server`, starts it again).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

from .file_modes import apply_umask

IDLE_ENV = "ODQA_PREFECT_IDLE_S"
IDLE_DEFAULT_S = 3600.0
WATCH_ENV = "ODQA_PREFECT_WATCH_S"
WATCH_DEFAULT_S = 30.0
ACTIVE_STATES = ["PENDING", "RUNNING", "CANCELLING"]


def idle_limit() -> float:
    """Seconds of idleness after which the server stops (0: never)."""
    return float(os.environ.get(IDLE_ENV) or IDLE_DEFAULT_S)


def watch_period() -> float:
    """Seconds between two checks."""
    return float(os.environ.get(WATCH_ENV) or WATCH_DEFAULT_S)


def active_flow_runs(api_url: str) -> int | None:
    """How many flow runs are active on the server (None: it did not answer)."""
    body = json.dumps({"flow_runs": {"state": {"type": {"any_": ACTIVE_STATES}}}}).encode()
    request = urllib.request.Request(f"{api_url}/flow_runs/count", data=body, method="POST",
                                     headers={"content-type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(json.loads(response.read()))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def last_busy(workspace: Path, api_url: str) -> float | None:
    """When the server was last seen in use (time.time(); now when it is in use, see the module
    docstring); None when nothing says it was ever used."""
    from .local_server import ServerPaths, foreground_running, live_clients_since

    if live_clients_since(workspace) is not None or foreground_running(workspace) is not None:
        return time.time()
    if active_flow_runs(api_url):
        return time.time()
    try:
        return ServerPaths(workspace).last_used.stat().st_mtime
    except OSError:
        return None


def watch(server_pid: int, workspace: Path, port: int) -> str:
    """Check until the server is gone (stopping it when it should stop); returns why the watch
    ended. Never returns while the server runs: a check that raises is logged and retried."""
    from .local_server import HOST, is_prefect_server

    api_url = f"http://{HOST}:{port}/api"
    idle_s, period = idle_limit(), watch_period()
    used = time.time()
    why = None
    while True:
        if not is_prefect_server(server_pid):
            return why or f"the server (pid {server_pid}) is gone"
        try:
            why, used = check(server_pid, workspace, api_url, idle_s, used)
        except Exception:  # noqa: BLE001 (nothing may end the watch while the server runs)
            print(f"odqa watchdog: {_now()} a check of the server (pid {server_pid}) failed; watching on:\n"
                  f"{traceback.format_exc()}", flush=True)  # fmt: skip
        if why is None or is_prefect_server(server_pid):
            time.sleep(period)


def check(server_pid: int, workspace: Path, api_url: str, idle_s: float, used: float) -> tuple[str | None, float]:
    """One look at the server: stops it when its workspace is gone or when it has been idle
    ``idle_s`` (0: never idle); returns (why it was stopped, or None; when it was last used)."""
    from .local_server import stop_server, terminate, workspace_gone

    gone = workspace_gone(server_pid, workspace)
    if gone is not None:
        terminate(server_pid, group=True)
        return f"stopped the server (pid {server_pid}): {gone}", used
    if idle_s <= 0:
        return None, used
    used = max(used, last_busy(workspace, api_url) or used)
    if time.time() - used < idle_s:
        return None, used
    if stop_server(workspace, only_pid=server_pid) is None:  # the record names another server: not ours
        terminate(server_pid, group=True)
    return f"stopped the server (pid {server_pid}): idle for {idle_s:.0f} s", used


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m odqa.flows.backend.watchdog SERVER_PID WORKSPACE PORT", file=sys.stderr)
        return 2
    try:
        apply_umask()
    except ValueError as error:  # the watch matters more than the modes of its log lines
        print(f"odqa watchdog: {error}; the umask stays as it was", flush=True)
    why = watch(int(args[0]), Path(args[1]), int(args[2]))
    print(f"odqa watchdog: {why}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
