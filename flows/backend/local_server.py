"""One long-lived Prefect server per workspace, shared by the CLI, `./run server` and the UI.

Without it every CLI flow verb started Prefect's temporary server for the call (6-30 s) and its
runs vanished with it. Now the first verb that runs a flow starts the workspace's server in the
background (its own session, so it outlives the call and ignores the terminal's Ctrl-C); later
calls find it and pay nothing. `./run server stop` (or `odqa server stop`) stops it.

Each workspace has its own server and its own database (`flows.backend.database`: a PostgreSQL
database named after the workspace's path), so the UI of a workspace shows its runs and its
deployments only, and the `gpu` slots of one workspace are not held by another's runs.

State, in the workspace::

    prefect/server.json    pid, port, database of the running server (written atomically)
    prefect/server.lock    serialises starting and stopping between processes
    prefect/home/          the server's PREFECT_HOME
    prefect/clients/       one file per running odqa call that reports to the server
    prefect/last-used      touched by every call that needs the server (the watchdog's clock)
    prefect/foreground.json  pid of `./run server` and of its worker while it runs
    prefect-logs/server.log  the server's output (appended)

A server that died or was killed is noticed by the next call (its pid is gone) and started again
on the same database and port; so is a killed PostgreSQL postmaster under a live server (the
server answers its health check without a database, so the cluster itself is checked). A
watchdog beside the server (`flows.backend.watchdog`) stops it when the workspace folder is gone
or replaced (`workspace_gone`), killing it when it does not stop, or when it has been idle for
``$ODQA_PREFECT_IDLE_S`` seconds (default one hour); a server found without one (its watchdog
was killed) gets a new one from the next call, `odqa server status` or `list`
(`ensure_watchdog`). Nothing that runs in the background creates a folder of the workspace: only
a verb the user runs may create it (`ensure_server`). Runs it was orchestrating that no live process owns anymore are
set to Crashed (see `crash_orphaned_runs`); the workspace's tables are untouched, since every
write to them is atomic and independent of Prefect. A CLI call stamps the flow runs it creates
with its process (`stamped_flow_runs`), so a call killed while the server lives on is noticed
too: the next verb sets its runs Crashed, and those of calls still alive are left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import socket
import stat as file_stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .auth import api_client, client_auth_string, server_auth_string
from .database import PrefectDatabase, database_name, prefect_database, sqlite_database
from .file_modes import append_log
from .postgres import Cluster, PostgresUnavailable, local_cluster

HOST = "127.0.0.1"
PREFERRED_PORT = 4200
PORT_ENV = "ODQA_PREFECT_PORT"  # the port a workspace's server prefers; 0: any free port
STATE_DIR = "prefect"
LOG_DIR = "prefect-logs"
STARTUP_TIMEOUT_ENV = "ODQA_PREFECT_STARTUP_TIMEOUT"
STARTUP_TIMEOUT_S = 300.0
STOP_TIMEOUT_ENV = "ODQA_PREFECT_STOP_TIMEOUT"  # seconds a server gets after SIGTERM before SIGKILL
STOP_TIMEOUT_S = 30.0
SERVER_MODULE = "odqa.flows.backend.guarded_prefect"  # `prefect server start` behind the Host check
WATCHDOG_MODULE = "odqa.flows.backend.watchdog"
DATABASE_RECOVERY_S = 60.0  # how long a server may take to reconnect after PostgreSQL restarted
# Environment of the caller the server must not inherit: the CLI's logging set-up (the server
# writes its own log) and another server's address or database.
FOREIGN_ENV = ("PREFECT_LOGGING_", "PREFECT_API_URL", "PREFECT_SERVER_DATABASE_", "PREFECT_API_DATABASE_",
               "PREFECT_SERVER_API_", "PREFECT_UI_", "PREFECT_SERVER_UI_", "PREFECT_HOME", "PREFECT_PROFILE")  # fmt: skip


@dataclass(frozen=True)
class ServerPaths:
    """Where a workspace keeps its server's state and log (see the module docstring)."""

    workspace: Path

    @property
    def state_dir(self) -> Path:
        return self.workspace / STATE_DIR

    @property
    def record(self) -> Path:
        return self.state_dir / "server.json"

    @property
    def lock(self) -> Path:
        return self.state_dir / "server.lock"

    @property
    def home(self) -> Path:
        return self.state_dir / "home"

    @property
    def clients(self) -> Path:
        return self.state_dir / "clients"

    @property
    def sqlite(self) -> Path:
        return self.state_dir / "prefect.db"

    @property
    def last_used(self) -> Path:
        return self.state_dir / "last-used"

    @property
    def foreground(self) -> Path:
        return self.state_dir / "foreground.json"

    @property
    def log_dir(self) -> Path:
        return self.workspace / LOG_DIR

    @property
    def server_log(self) -> Path:
        return self.log_dir / "server.log"


@dataclass(frozen=True)
class ServerRecord:
    """What `prefect/server.json` holds about the workspace's running server."""

    pid: int
    port: int
    backend: str
    database: str
    started_at: str
    log: str
    watchdog_pid: int | None = None  # `flows.backend.watchdog`, stops it when idle or orphaned
    cluster_root: str | None = None  # the PostgreSQL cluster holding `database` (backend postgresql)

    @property
    def api_url(self) -> str:
        return f"http://{HOST}:{self.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.port}"


@dataclass
class ServerStatus:
    """The outcome of `ensure_server`: the server, and what this call had to do for it."""

    record: ServerRecord
    started: bool = False
    restarted_after: int | None = None  # pid of the server found dead
    crashed_runs: list[str] = field(default_factory=list)
    note: str | None = None  # the backend's fallback line, when it is SQLite
    watchdog_started: int | None = None  # pid of the watchdog started for a running server that had none


# -- processes ---------------------------------------------------------------------------------
def process_alive(pid: int) -> bool:
    """A running process (zombies count as gone: a killed detached server may linger as one)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def is_prefect_server(pid: int) -> bool:
    """``pid`` is alive and is a ``prefect server start`` (not a process that reused the pid)."""
    if not process_alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: trust the pid
    return b"prefect" in b" ".join(argv) and b"server" in argv and b"start" in argv


def answers(api_url: str, timeout: float = 2.0) -> bool:
    """Whether the server at ``api_url`` answers its health check within ``timeout``."""
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(api_url: str, alive: Callable[[], bool], timeout: float, log: Path | None = None) -> None:
    """Until the server answers; raises when its process exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not answers(api_url):
        if not alive():
            raise RuntimeError(f"the Prefect server for {api_url} exited while starting{_log_tail(log)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Prefect server at {api_url} did not answer within {timeout:.0f} s{_log_tail(log)}")
        time.sleep(0.5)


def port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now (SO_REUSEADDR, as uvicorn binds: the closed
    connections of a killed server's port linger in TIME_WAIT without making it busy)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def server_env(database: PrefectDatabase, port: int, home: Path) -> dict[str, str]:
    """The environment of a server process: the caller's, minus FOREIGN_ENV, plus its database
    and its address (which the UI's pages call: by default they would call port 4200).

    Closed to other web pages (docs/security.md): Prefect allows every origin by default (any page
    the user opens could start a deployment through it); here only the UI's own origin may call
    the API across origins, and CSRF protection makes every state-changing request carry a token
    that only the UI's origin and Prefect's clients can read (they fetch it themselves)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN_ENV)}
    env.update(database.server_env())
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_SERVER_API_HOST=HOST,
               PREFECT_SERVER_API_PORT=str(port), PREFECT_UI_API_URL=f"http://{HOST}:{port}/api",
               PREFECT_SERVER_CORS_ALLOWED_ORIGINS=f"http://{HOST}:{port},http://localhost:{port}",
               PREFECT_SERVER_CSRF_PROTECTION_ENABLED="true",
               PREFECT_SERVER_LOGGING_LEVEL=env.get("ODQA_PREFECT_SERVER_LOG_LEVEL", "WARNING"))  # fmt: skip
    auth = server_auth_string(home)  # ODQA_PREFECT_AUTH=on: basic auth on the API (flows.backend.auth)
    if auth is not None:
        env.update(PREFECT_SERVER_API_AUTH_STRING=auth, PREFECT_API_AUTH_STRING=auth)
    return env


def launch(database: PrefectDatabase, port: int, home: Path, log: Path, detached: bool) -> subprocess.Popen:
    """Start ``prefect server start`` (behind odqa's Host check: `flows.backend.guarded_prefect`)
    on HOST:``port`` with ``database``, output appended to ``log``. ``detached``: in a session of
    its own, so it outlives its caller and the terminal's Ctrl-C."""
    home.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with append_log(log) as sink:
        sink.write(f"\n=== {_now()} prefect server start on {HOST}:{port}, {database.describe()}\n".encode())
        sink.flush()
        return subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, "server", "start", "--host", HOST, "--port", str(port)],
            env=server_env(database, port, home), cwd=home, stdin=subprocess.DEVNULL, stdout=sink,
            stderr=subprocess.STDOUT, start_new_session=detached,
        )  # fmt: skip


def stop_timeout() -> float:
    """Seconds a server gets to stop after SIGTERM (``$ODQA_PREFECT_STOP_TIMEOUT``, default 30)."""
    return float(os.environ.get(STOP_TIMEOUT_ENV) or STOP_TIMEOUT_S)


def terminate(pid: int, timeout: float | None = None, group: bool = False) -> None:
    """SIGTERM (the server shuts its services down), SIGKILL after ``timeout`` (default
    `stop_timeout`). ``group``: when ``pid`` leads a process group of its own (a detached server),
    the SIGKILL goes to the whole group, and what is left of the group once ``pid`` is gone is
    killed too: nothing it started outlives it."""
    leader = group and _leads_group(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + (stop_timeout() if timeout is None else timeout)
    while process_alive(pid) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if leader:
            os.killpg(pid, signal.SIGKILL)
        elif process_alive(pid):
            os.kill(pid, signal.SIGKILL)
    _reap(pid)


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except OSError:
        return False


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status when it is our child (else it stays a zombie)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


# -- the workspace's server --------------------------------------------------------------------
def read_record(workspace: Path) -> ServerRecord | None:
    try:
        data = json.loads(ServerPaths(workspace).record.read_text(encoding="utf-8"))
        return ServerRecord(**data)
    except (OSError, ValueError, TypeError):
        return None


def write_record(paths: ServerPaths, record: ServerRecord) -> None:
    """Write the record (under `_locked`, which made sure its folder exists)."""
    atomic_write_json(paths.record, asdict(record))


@contextlib.contextmanager
def _locked(paths: ServerPaths, create: bool = True) -> Iterator[None]:
    """The workspace's server lock for the block. ``create``: a verb the user runs may create the
    workspace's state folder; everything else (stopping, a watchdog) needs it to exist, and
    raises FileNotFoundError when it does not: a deleted workspace is never made again."""
    if create:
        paths.state_dir.mkdir(parents=True, exist_ok=True)
    with paths.lock.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def running_server(workspace: Path) -> ServerRecord | None:
    """The workspace's server when its process is alive and answers; starts nothing."""
    record = read_record(workspace)
    if record is None or not is_prefect_server(record.pid) or not answers(record.api_url, timeout=1.0):
        return None
    return record


def workspace_database(workspace: Path) -> PrefectDatabase:
    """The workspace's Prefect database (created, and the cluster started, when needed). In
    PostgreSQL its comment holds the workspace's full path (`./run postgres status|stop` show it;
    databases made before this was written get it at their server's next start)."""
    database = prefect_database(database_name(workspace), ServerPaths(workspace).sqlite)
    if database.kind == "postgresql" and database.cluster is not None:
        database.cluster.set_workspace(database.name, workspace)
    return database


def ensure_server(workspace: Path, port: int | None = None) -> ServerStatus:
    """The workspace's server, started in the background when none runs (again, when it died).

    ``port``: wanted port (``./run server --port``); else the one it had, else
    ``$ODQA_PREFECT_PORT`` (default 4200) when free, else any free port."""
    paths = ServerPaths(workspace)
    timeout = float(os.environ.get(STARTUP_TIMEOUT_ENV) or STARTUP_TIMEOUT_S)
    with _locked(paths):
        paths.last_used.touch()
        record = read_record(workspace)
        if record is not None and is_prefect_server(record.pid):
            wait_healthy(record.api_url, lambda: is_prefect_server(record.pid), timeout, Path(record.log))
            status = ServerStatus(record, note=restart_dead_cluster(record, workspace))
            watchdog = ensure_watchdog(paths, record)
            if watchdog is not None:
                status.record, status.watchdog_started = replace(record, watchdog_pid=watchdog), watchdog
        else:
            status = _start_server(paths, workspace, record, port, timeout)
    if not status.started:  # runs of calls killed since: only those stamped with a dead pid are judged
        status.crashed_runs = crash_orphaned_runs(status.record.api_url, workspace, judge_unstamped=False)
        return status
    with registered_client(workspace):  # in use for the watchdog, however long this takes
        status.crashed_runs = crash_orphaned_runs(status.record.api_url, workspace)
        paths.last_used.touch()  # the watchdog's idle clock starts once the server is ready
    return status


def _start_server(paths: ServerPaths, workspace: Path, previous: ServerRecord | None, port: int | None,
                  timeout: float) -> ServerStatus:  # fmt: skip
    """Start the workspace's server (the caller holds its lock) and record it."""
    database = workspace_database(workspace)
    chosen = _choose_port(port, previous)
    process = launch(database, chosen, paths.home, paths.server_log, detached=True)
    cluster_root = str(database.cluster.root) if database.cluster is not None else None
    fresh = ServerRecord(pid=process.pid, port=chosen, backend=database.kind, database=database.name,
                         started_at=_now(), log=str(paths.server_log), cluster_root=cluster_root)  # fmt: skip
    try:
        wait_healthy(fresh.api_url, lambda: process.poll() is None, timeout, paths.server_log)
    except BaseException:
        terminate(process.pid, group=True)
        raise
    fresh = replace(fresh, watchdog_pid=launch_watchdog(fresh.pid, fresh.port, workspace, paths.server_log))
    write_record(paths, fresh)
    return ServerStatus(fresh, started=True, note=database.note,
                        restarted_after=previous.pid if previous is not None else None)  # fmt: skip


def record_cluster(record: ServerRecord) -> Cluster | None:
    """The PostgreSQL cluster behind ``record``'s server (None: another backend, or none found)."""
    if record.backend != "postgresql":
        return None
    try:
        return local_cluster(Path(record.cluster_root) if record.cluster_root else None)
    except PostgresUnavailable:
        return None


def restart_dead_cluster(record: ServerRecord, workspace: Path) -> str | None:
    """Start the cluster again when its postmaster is gone under a live server (the server's
    health check answers without a database, so it has to be looked at); the line to show, or
    None when nothing had to be done. The server's pool reconnects by itself."""
    cluster = record_cluster(record)
    if cluster is None or cluster.running():
        return None
    cluster.ensure_running()
    if not wait_database(record.api_url, DATABASE_RECOVERY_S):
        raise RuntimeError(f"PostgreSQL ({cluster.root}) was down and was started again, but the Prefect server at "
                           f"{record.api_url} still cannot read its database {record.database}; "
                           f"`{stop_command(workspace)}` and retry")  # fmt: skip
    return f"PostgreSQL ({cluster.root}) had stopped under this workspace's Prefect server; started it again"


def wait_database(api_url: str, timeout: float) -> bool:
    """Until the server reaches its database again (its pool pings each connection before use
    and drops those the dead postmaster left); False when ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if database_answers(api_url):
            return True
        time.sleep(0.5)
    return False


def database_answers(api_url: str) -> bool:
    """Whether the server can use its database now: Prefect's readiness check (``GET /ready``
    takes a connection from the server's pool). A GET, and exempt from the auth string, since
    CSRF protection refuses a POST without a token and the auth string may be on."""
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/ready", timeout=10) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def database_health(record: ServerRecord) -> str:
    """One line on the database of a running server, for `odqa server status`."""
    if record.backend == "postgresql":
        cluster = record_cluster(record)
        pid = cluster.server_pid() if cluster is not None else None
        where = f"PostgreSQL database {record.database} in {cluster.root if cluster else record.cluster_root}"
        if pid is None:
            return f"database: {where}: DOWN (postmaster not running; the next odqa verb starts it again)"
        reads = "the server reads it" if database_answers(record.api_url) else "the server CANNOT read it"
        return f"database: {where}: up (postmaster pid {pid}), {reads}"
    reads = "the server reads it" if database_answers(record.api_url) else "the server CANNOT read it"
    return f"database: {record.backend} {record.database}: {reads}"


def launch_watchdog(server_pid: int, port: int, workspace: Path, log: Path) -> int:
    """Start `flows.backend.watchdog` for the server ``server_pid``, detached like it; its pid. Its
    output is appended to ``log`` when the log's folder exists (never created: the workspace may
    be gone, and the watchdog is then what stops the server), else discarded."""
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(append_log(log)) if log.parent.is_dir() else subprocess.DEVNULL
        process = subprocess.Popen([sys.executable, "-m", WATCHDOG_MODULE, str(server_pid), str(workspace), str(port)],
                                   stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                   cwd=Path(__file__).resolve().parents[2], start_new_session=True)  # fmt: skip
    return process.pid


def watchdog_target(pid: int) -> int | None:
    """The server pid the watchdog ``pid`` watches (None: ``pid`` is not a live watchdog)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        at = next(i for i, arg in enumerate(argv) if arg.endswith(WATCHDOG_MODULE.removeprefix("odqa.")))
        return int(argv[at + 1])
    except (OSError, StopIteration, IndexError, ValueError):
        return None


def is_watchdog(pid: int) -> bool:
    return watchdog_target(pid) is not None


def watched_pids() -> set[int]:
    """Server pids that a live watchdog watches."""
    found = (watchdog_target(int(entry.name)) for entry in Path("/proc").iterdir() if entry.name.isdigit())
    return {pid for pid in found if pid is not None}


def ensure_watchdog(paths: ServerPaths, record: ServerRecord) -> int | None:
    """Start a watchdog for ``record``'s running server when none watches it (it was killed, or
    died) and record it (the caller holds the lock); its pid, None when one was watching.
    Without /proc a watchdog's command line cannot be read: the recorded one being alive counts.
    A recorded server whose working folder is not this workspace's (its pid reused by another
    workspace's server, a record written by hand) gets none: a watchdog would stop it."""
    if workspace_gone(record.pid, paths.workspace) is not None:
        return None
    if not Path("/proc/self/cmdline").is_file():
        watched = bool(record.watchdog_pid) and process_alive(record.watchdog_pid)
    else:
        recorded = watchdog_target(record.watchdog_pid) if record.watchdog_pid else None
        watched = recorded == record.pid or record.pid in watched_pids()
    if watched:
        return None
    watchdog = launch_watchdog(record.pid, record.port, paths.workspace, paths.server_log)
    write_record(paths, replace(record, watchdog_pid=watchdog))
    return watchdog


def watch_workspace_server(workspace: Path, record: ServerRecord) -> int | None:
    """`ensure_watchdog` for a call that starts no server (`odqa server status`): under the lock,
    when the workspace's folder still exists; the new watchdog's pid, None when none was needed."""
    paths = ServerPaths(workspace)
    try:
        with _locked(paths, create=False):
            current = read_record(workspace)
            return ensure_watchdog(paths, current) if current == record else None
    except FileNotFoundError:
        return None


def folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the folder ``path`` (None: there is none): a folder deleted and made
    again at the same path has another."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino) if file_stat.S_ISDIR(found.st_mode) else None


def workspace_gone(server_pid: int, workspace: Path) -> str | None:
    """Why the server ``server_pid`` no longer has its workspace (None while it has): the folder
    is gone, or the folder at that path is not the one the server started in. The kernel keeps
    the server's working folder, ``<workspace>/prefect/home``, by device and inode: a folder
    deleted and made again at the same path (or moved away) is another one, whoever made it."""
    home = ServerPaths(workspace).home
    if not workspace.is_dir():
        return f"its workspace {workspace} is gone"
    try:
        now = os.stat(home)
    except (FileNotFoundError, NotADirectoryError):
        return f"its folder {home} is gone"
    except OSError:
        return None  # not readable now: not proof of anything
    try:
        started = os.stat(f"/proc/{server_pid}/cwd")
    except OSError:
        return None  # no /proc (or the server just exited): the folder's presence is all there is
    if (started.st_dev, started.st_ino) != (now.st_dev, now.st_ino):
        return f"its workspace {workspace} was deleted or replaced since it started (another folder is there now)"
    return None


def stop_command(workspace: Path) -> str:
    """The command that stops ``workspace``'s server where the user is: `./run server stop` in the
    checkout this code runs from (the only place `./run` exists), else `odqa server stop` (an
    installed odqa, or any other folder); with the workspace named, quoted for the shell, unless
    it is the default one."""
    default = Path(os.environ.get("ODQA_WORKSPACE") or "workspace").expanduser().resolve()
    named = f" -w {shlex.quote(str(workspace))}" if workspace.resolve() != default else ""
    with contextlib.suppress(OSError):
        if (Path.cwd() / "run").samefile(Path(__file__).resolve().parents[2] / "run"):
            return f"./run server stop{named}"
    return f"odqa{named} server stop"


def _choose_port(wanted: int | None, previous: ServerRecord | None) -> int:
    if wanted:
        if not port_free(wanted):
            raise RuntimeError(f"port {wanted} on {HOST} is in use; choose another with --port")
        return wanted
    preferred = int(os.environ.get(PORT_ENV) or PREFERRED_PORT)
    for candidate in (previous.port if previous else None, preferred):
        if candidate and port_free(candidate):
            return candidate
    return free_port()


def stop_server(workspace: Path, only_pid: int | None = None) -> ServerRecord | None:
    """Stop the workspace's server, its watchdog and a `./run server` (with its worker) running
    for it; the record of the server stopped (None when none ran). ``only_pid``: stop nothing
    unless the recorded server is that one (the watchdog's stop, after a restart elsewhere).
    Creates nothing: a workspace without a server folder has no server to stop."""
    paths = ServerPaths(workspace)
    if not paths.state_dir.is_dir():
        return None
    with _locked(paths, create=False):
        record = read_record(workspace)
        if record is None or (only_pid is not None and record.pid != only_pid):
            return None
        stop_foreground(workspace)
        alive = is_prefect_server(record.pid)
        if alive:
            terminate(record.pid, group=True)
        if record.watchdog_pid and record.watchdog_pid != os.getpid() and is_watchdog(record.watchdog_pid):
            terminate(record.watchdog_pid, timeout=5)
        paths.record.unlink(missing_ok=True)
        return record if alive else None


# -- `./run server` in the foreground ----------------------------------------------------------
def write_foreground(workspace: Path, worker_pid: int) -> None:
    """Record this process as the workspace's `./run server`, with its worker's pid."""
    paths = ServerPaths(workspace)
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(paths.foreground, {"pid": os.getpid(), "worker_pid": worker_pid, "started": _now()})


def clear_foreground(workspace: Path) -> None:
    with contextlib.suppress(OSError):
        data = json.loads(ServerPaths(workspace).foreground.read_text(encoding="utf-8"))
        if data.get("pid") == os.getpid():
            ServerPaths(workspace).foreground.unlink(missing_ok=True)


def server_stops_too(workspace: Path) -> bool:
    """In `./run server`: whether the stop it got comes from `./run server stop`, which stops the
    workspace's server after it (`stop_foreground` marks this process's record first)."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(ServerPaths(workspace).foreground.read_text(encoding="utf-8"))
        return data.get("pid") == os.getpid() and bool(data.get("server_stops_too"))
    return False


def foreground_running(workspace: Path) -> dict | None:
    """``{"pid", "worker_pid", "started"}`` of the workspace's `./run server` while it (or its
    worker) is alive; None otherwise."""
    try:
        data = json.loads(ServerPaths(workspace).foreground.read_text(encoding="utf-8"))
        pids = [int(data["pid"]), int(data["worker_pid"])]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return data if any(process_alive(pid) for pid in pids) else None


def stop_foreground(workspace: Path, timeout: float = 15.0) -> int | None:
    """SIGTERM the workspace's `./run server` (which stops its worker), then kill a worker still
    left; the pid of the `./run server` stopped, or None when none ran. The record says first
    that the server stops too (`server_stops_too`), so `./run server` does not tell its user the
    server keeps running."""
    data = foreground_running(workspace)
    if data is None:
        return None
    pid, worker = int(data["pid"]), int(data["worker_pid"])
    if pid != os.getpid():
        atomic_write_json(ServerPaths(workspace).foreground, {**data, "server_stops_too": True})
        terminate(pid, timeout=timeout)
    if process_alive(worker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker, signal.SIGKILL)  # the worker leads its own process group
        terminate(worker, timeout=5)
    ServerPaths(workspace).foreground.unlink(missing_ok=True)
    return pid


def reset_server(workspace: Path) -> str:
    """Stop the server and delete its database (every run, deployment and log in Prefect); the
    workspace's tables stay. Returns what was done, in words."""
    recorded = read_record(workspace)
    stopped = stop_server(workspace)
    if recorded is not None and recorded.backend == "sqlite":
        database = sqlite_database(ServerPaths(workspace).sqlite, note=None)
    else:
        database = workspace_database(workspace)
    dropped = database.drop()
    return (f"{'stopped the server (pid ' + str(stopped.pid) + '), ' if stopped else ''}"
            f"{'deleted' if dropped else 'nothing to delete in'} {database.describe()}")  # fmt: skip


# -- calls that report to the server -----------------------------------------------------------
@contextlib.contextmanager
def registered_client(workspace: Path) -> Iterator[None]:
    """Mark this process as a live caller of the workspace's server for the block (see
    `crash_orphaned_runs`)."""
    clients = ServerPaths(workspace).clients
    clients.mkdir(parents=True, exist_ok=True)
    entry = clients / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
    atomic_write_json(entry, {"pid": os.getpid(), "started": _now()})
    try:
        yield
    finally:
        entry.unlink(missing_ok=True)


def live_clients_since(workspace: Path) -> datetime | None:
    """When the oldest live registered caller started (None: no live caller). Entries of dead
    processes are removed."""
    oldest: datetime | None = None
    for entry in ServerPaths(workspace).clients.glob("*.json"):
        try:
            data = json.loads(entry.read_text(encoding="utf-8"))
            pid, started = int(data["pid"]), datetime.fromisoformat(data["started"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not process_alive(pid):
            entry.unlink(missing_ok=True)
            continue
        oldest = started if oldest is None else min(oldest, started)
    return oldest


@contextlib.contextmanager
def stamped_flow_runs() -> Iterator[None]:
    """For the block, every flow run this process creates gets ``HOST:PID`` as its
    ``infrastructure_pid`` (the form Prefect's process worker gives deployment runs), so that once
    this process is gone, the next call sets the run Crashed (`crash_orphaned_runs`) while the
    runs of other calls still alive keep running: without the stamp, a run tells nothing about
    which of several concurrent calls owns it. One PATCH per flow run; Prefect itself reads the
    field only for runs of a work pool, which a CLI call's runs are not."""
    from prefect.client.orchestration import PrefectClient, SyncPrefectClient

    if getattr(SyncPrefectClient.create_flow_run, "odqa_stamped", False):
        yield  # an outer block (a verb calling another in-process) stamps them already
        return
    sync_create, async_create = SyncPrefectClient.create_flow_run, PrefectClient.create_flow_run
    stamp = f"{socket.gethostname()}:{os.getpid()}"

    def create(self: SyncPrefectClient, *args: Any, **kwargs: Any) -> Any:
        run = sync_create(self, *args, **kwargs)
        run.infrastructure_pid = stamp
        self.update_flow_run(run.id, infrastructure_pid=stamp)
        return run

    async def acreate(self: PrefectClient, *args: Any, **kwargs: Any) -> Any:
        run = await async_create(self, *args, **kwargs)
        run.infrastructure_pid = stamp
        await self.update_flow_run(run.id, infrastructure_pid=stamp)
        return run

    create.odqa_stamped = True  # type: ignore[attr-defined]
    SyncPrefectClient.create_flow_run = create  # type: ignore[method-assign]
    PrefectClient.create_flow_run = acreate  # type: ignore[method-assign]
    try:
        yield
    finally:
        SyncPrefectClient.create_flow_run = sync_create  # type: ignore[method-assign]
        PrefectClient.create_flow_run = async_create  # type: ignore[method-assign]


def crash_orphaned_runs(api_url: str, workspace: Path, judge_unstamped: bool = True) -> list[str]:
    """Set to Crashed the flow runs the server believes active (Pending, Running, Cancelling) whose
    process is gone; names of the runs changed.

    A run is orphaned when its ``infrastructure_pid`` (set by the worker for deployment runs, and
    by `stamped_flow_runs` for CLI calls) names a dead process on this machine. A run without one
    (a plain Python caller's, or one whose call died before stamping it) is judged only when
    ``judge_unstamped`` (the server has just started): orphaned when it was created before every
    odqa call still running on this workspace started, so no live call can own it. A running
    server is not asked to judge those: a caller that no registry knows may still be alive."""
    import asyncio

    auth = client_auth_string(ServerPaths(workspace).home)
    live_since = live_clients_since(workspace)
    return asyncio.run(_crash_orphaned_runs(api_url, live_since, auth, judge_unstamped))


async def _crash_orphaned_runs(api_url: str, live_since: datetime | None, auth: str | None,
                               judge_unstamped: bool) -> list[str]:  # fmt: skip
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        TaskRunFilter,
        TaskRunFilterFlowRunId,
        TaskRunFilterState,
        TaskRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort, TaskRunSort
    from prefect.states import Crashed

    active = [StateType.PENDING, StateType.RUNNING, StateType.CANCELLING]
    message = "the process that ran this flow run is gone (odqa)"
    crashed: list[str] = []
    async with api_client(api_url, auth) as client:
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=active))),
            sort=FlowRunSort.ID_DESC, limit=200,  # 3.8.8 rejects the client's None defaults (HTTP 422)
        )
        for run in runs:
            if not _orphaned(run, live_since, judge_unstamped):
                continue
            await client.set_flow_run_state(run.id, Crashed(message=message), force=True)
            tasks = await client.read_task_runs(
                task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[run.id]),
                                              state=TaskRunFilterState(type=TaskRunFilterStateType(any_=active))),
                sort=TaskRunSort.ID_DESC, limit=200,
            )  # fmt: skip
            for task_run in tasks:
                await client.set_task_run_state(task_run.id, Crashed(message=message), force=True)
            crashed.append(run.name)
    return crashed


def _orphaned(run, live_since: datetime | None, judge_unstamped: bool) -> bool:
    if run.infrastructure_pid:
        host, _, pid = run.infrastructure_pid.rpartition(":")
        if host and host != socket.gethostname():
            return False  # another machine's process: not ours to judge
        return pid.isdigit() and not process_alive(int(pid))
    if run.deployment_id is not None or not judge_unstamped:
        return False  # a worker is still submitting it; or its caller may be alive
    return live_since is None or (run.created is not None and run.created < live_since)


# -- temporary servers (tests, `flows.plumbing.server.local_prefect`) -------------------------
@dataclass(frozen=True)
class TemporaryServer:
    api_url: str
    log: Path
    database: PrefectDatabase
    process: subprocess.Popen


@contextlib.contextmanager
def temporary_server(home: Path, log: Path, label: str = "tmp", port: int | None = None,
                     timeout: float | None = None) -> Iterator[TemporaryServer]:  # fmt: skip
    """A server on a database of its own (dropped at the end) for tests and throw-away runs;
    stopped, with its database, when the block ends."""
    key = f"{label}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    database = prefect_database(database_name(key, kind=label[:8]), home / "prefect.db")
    if database.note:
        print(f"odqa: {database.note}", file=sys.stderr)
    chosen = port or free_port()
    process = launch(database, chosen, home, log, detached=False)
    server = TemporaryServer(f"http://{HOST}:{chosen}/api", log, database, process)
    try:
        wait_healthy(server.api_url, lambda: process.poll() is None,
                     timeout or float(os.environ.get(STARTUP_TIMEOUT_ENV) or STARTUP_TIMEOUT_S), log)  # fmt: skip
        yield server
    finally:
        terminate(process.pid)
        process.wait()
        if database.kind != "configured":
            with contextlib.suppress(Exception):
                database.drop()


def atomic_write_json(path: Path, data: dict) -> None:
    """`storage.atomic.atomic_write_json`, imported when first needed: the `storage` package pulls
    in pyarrow and DuckDB (seconds and 100+ MB), which the watchdog importing this module must not."""
    from ...storage.atomic import atomic_write_json as write

    write(path, data)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _log_tail(log: Path | None, lines: int = 15) -> str:
    if log is None or not log.is_file():
        return ""
    tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    return f" (last lines of {log}):\n" + "\n".join(tail)


# -- every server on this machine (`odqa server list`) -----------------------------------------
@dataclass(frozen=True)
class FoundServer:
    """A `prefect server start` process odqa started: its workspace (None: a temporary server),
    whether that folder still exists, its port and its memory (its RSS and its children's)."""

    pid: int
    port: int | None
    workspace: Path | None
    workspace_exists: bool
    rss_mb: float
    watchdog: bool
    watchdog_started: bool = False  # it had none: `watch_unwatched` started one


def project_servers() -> list[FoundServer]:
    """Every Prefect server process of odqa's on this machine, found in /proc (so servers started
    by older versions, without a watchdog, are listed too): one whose working folder is
    ``<workspace>/prefect/home`` belongs to that workspace."""
    watched = watched_pids()
    found: list[FoundServer] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not is_prefect_server(int(entry.name)):
            continue
        pid = int(entry.name)
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if "--host" not in argv or HOST not in argv:
            continue  # not started by `launch`
        home = Path(cwd.removesuffix(" (deleted)"))
        workspace = home.parents[1] if home.name == "home" and home.parent.name == STATE_DIR else None
        port = argv[argv.index("--port") + 1] if "--port" in argv else ""
        found.append(FoundServer(pid, int(port) if port.isdigit() else None, workspace,
                                 workspace is not None and workspace_gone(pid, workspace) is None,
                                 _tree_rss_mb(pid), pid in watched))  # fmt: skip
    return sorted(found, key=lambda server: server.pid)


def watch_unwatched(servers: list[FoundServer]) -> list[FoundServer]:
    """``servers`` (from `project_servers`), each workspace server that no watchdog watched now
    with one: it stops the server when its workspace is gone (at its first check) or idle. A
    workspace still there gets the new watchdog's pid in its record when the record names that
    server; nothing is created in a workspace that is gone."""
    watched: list[FoundServer] = []
    for server in servers:
        if server.watchdog or server.workspace is None or server.port is None:
            watched.append(server)
            continue
        record = read_record(server.workspace) if server.workspace_exists else None
        if record is not None and record.pid == server.pid:
            started = watch_workspace_server(server.workspace, record)
        else:  # its workspace is gone (stopped at the first check), or records another server (stopped when idle)
            started = launch_watchdog(server.pid, server.port, server.workspace, ServerPaths(server.workspace).server_log)
        watched.append(replace(server, watchdog=True, watchdog_started=started is not None))
    return watched


def _tree_rss_mb(pid: int) -> float:
    """RSS of ``pid`` and its descendants, in MB."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
            status = Path(f"/proc/{current}/status").read_text()
            total += int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
    return total / 1024
