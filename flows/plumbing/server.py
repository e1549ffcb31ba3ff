"""`./run server`: the workspace's Prefect server with every odqa deployment and a worker, ready to
run from the UI.

Starts the workspace's long-lived server when it does not run (`flows.backend.local_server`: in
the background, on the local PostgreSQL), creates the process work pool (the machine's `gpu`
slots are lock files, `flows.plumbing.concurrency_slots`, not a server limit), deploys everything in prefect.yaml (`prefect
deploy --all`) and runs a worker for the pool in the foreground: its flow runs use this
workspace. Ctrl-C, SIGTERM (kill, systemd, tmux) and SIGHUP (a closed terminal) stop the worker,
and the flow runs it started, within WORKER_STOP_S seconds; the worker also dies with this
process when it is SIGKILLed. The server keeps serving CLI calls and the UI until `./run server
stop` (which stops a running `./run server` and its worker too) or until its watchdog finds it
idle (`flows.backend.watchdog`). `./run server status|stop|reset|list` report on, stop or wipe
it, or list every server odqa runs on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..backend.auth import AUTH_FILE, api_client, auth_status, client_auth_string
from ..backend.file_modes import append_log, apply_umask
from ..backend.local_server import (
    ServerPaths,
    clear_foreground,
    database_health,
    ensure_server,
    folder_identity,
    foreground_running,
    project_servers,
    read_record,
    reset_server,
    running_server,
    server_stops_too,
    stop_command,
    stop_server,
    temporary_server,
    watch_unwatched,
    watch_workspace_server,
    workspace_database,
    write_foreground,
)
from .concurrency_slots import gpu_slots
from .deployment_forms import deploy_typed_forms
from .prefect_fixes import drop_null_filter_fields, share_tls_context

REPO_ROOT = Path(__file__).resolve().parents[2]
POOL = "odqa-process"
WORKER_STOP_S = 5.0  # a worker (and its flow runs) gets this long after SIGINT before SIGKILL
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1


def prefect_env(api_url: str, workspace: Path | None = None, home: Path | None = None,
                auth_string: str | None = None) -> dict[str, str]:  # fmt: skip
    """Environment of the Prefect CLI and the worker: the server's address (and auth string, when
    it requires one) and, for the flows the worker runs, the workspace (deployments leave
    `workspace` empty, meaning $ODQA_WORKSPACE)."""
    env = dict(os.environ)
    if auth_string is not None:
        env["PREFECT_API_AUTH_STRING"] = auth_string
    env.update({"PREFECT_API_URL": api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "ODQA_HOME": str(REPO_ROOT), "HF_HUB_OFFLINE": env.get("HF_HUB_OFFLINE", "1")})  # fmt: skip
    if workspace is not None:
        env["ODQA_WORKSPACE"] = str(workspace)
    if home is not None:
        env["PREFECT_HOME"] = str(home)
    return env


def prefect(args: list[str], env: dict[str, str], timeout: float = 600) -> str:
    """Run the Prefect CLI of this interpreter; a failure raises with the CLI's output.

    Goes through `python -m odqa.flows.plumbing.server prefect ...` so the CLI runs with the 3.8.8 fixes below."""
    command = [sys.executable, "-m", "odqa.flows.plumbing.server", "prefect", *args]
    done = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"prefect {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


@dataclass
class LocalPrefect:
    """A server with pool, limit, deployments and (optionally) a worker: `api_url` for clients."""

    api_url: str
    env: dict[str, str]
    worker: subprocess.Popen | None = None

    def stop_worker(self) -> None:
        """SIGINT to the worker's process group (the worker and the flow runs it started), SIGKILL
        to the group after WORKER_STOP_S: Prefect's worker can take over 30 s to honour a signal."""
        if self.worker is None or self.worker.poll() is not None:
            return
        group = self.worker.pid  # the worker leads its own session (start_worker)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.worker.wait(timeout=WORKER_STOP_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        self.worker.wait()


def create_process_pool(api_url: str, auth_string: str | None, pool: str) -> None:
    """The process work pool `pool`, made (or reset) as `prefect work-pool create --type process
    --overwrite` makes it (the same default job template), in this process: the CLI's start-up
    costs ~5 CPU-s of every `./run server`."""
    import asyncio

    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.workers.utilities import get_default_base_job_template_for_infrastructure_type

    async def create() -> None:
        template = await get_default_base_job_template_for_infrastructure_type("process")
        async with api_client(api_url, auth_string) as client:
            await client.create_work_pool(WorkPoolCreate(name=pool, type="process", base_job_template=template),
                                          overwrite=True)  # fmt: skip

    asyncio.run(create())


def prepare(api_url: str, env: dict[str, str], pool: str, deploy: bool) -> tuple[int, str]:
    """Work pool and (``deploy``) every deployment of prefect.yaml on the server; returns this
    machine's `gpu` slots and why."""
    create_process_pool(api_url, env.get("PREFECT_API_AUTH_STRING"), pool)
    slots = gpu_slots()
    if deploy:
        prefect(["--no-prompt", "deploy", "--all"], env)
    return slots


def start_worker(env: dict[str, str], pool: str, log: Path) -> subprocess.Popen:
    """The pool's worker, in a session of its own (so its flow runs can be stopped with it as one
    process group, and the terminal's Ctrl-C reaches it only through `stop_worker`), killed by
    the kernel when this process dies without stopping it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with append_log(log) as sink:
        return subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"],
                                env=env, cwd=REPO_ROOT, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_die_with_parent)  # fmt: skip


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent dies (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class StopRequested(Exception):
    """A stop signal reached `./run server`."""


def _raise_stop(signum: int, _frame: object) -> None:
    raise StopRequested(signal.Signals(signum).name)


@contextlib.contextmanager
def local_prefect(
    home: Path, log_dir: Path, pool: str = POOL, deploy: bool = True, worker: bool = True,
    startup_timeout: float = 300, workspace: Path | None = None,
) -> Iterator[LocalPrefect]:  # fmt: skip
    """A throw-away server (a database of its own, dropped at the end) with pool, `gpu` limit,
    deployments and worker, all stopped when the block ends: for tests."""
    with temporary_server(home, log_dir / "server.log", label="deploy", timeout=startup_timeout) as server:
        env = prefect_env(server.api_url, workspace, home, client_auth_string(home))
        prepare(server.api_url, env, pool, deploy)
        running = LocalPrefect(server.api_url, env)
        if worker:
            running.worker = start_worker(env, pool, log_dir / "worker.log")
        try:
            yield running
        finally:
            running.stop_worker()


def run_prefect_cli(args: list[str]) -> int:
    """`python -m odqa.flows.plumbing.server prefect ARGS`: the Prefect CLI with odqa's fixes applied
    (`flows.plumbing.prefect_fixes`) and typed Custom run forms for what it deploys
    (`flows.plumbing.deployment_forms`)."""
    drop_null_filter_fields()
    share_tls_context()
    deploy_typed_forms()
    from prefect.cli import app

    sys.argv = ["prefect", *args]
    try:
        app()
    except SystemExit as done:
        return int(done.code or 0) if not isinstance(done.code, str) else 1
    return 0


def workspace_of(chosen: str | None) -> Path:
    """The workspace as the CLI resolves it (`--workspace`, else $ODQA_WORKSPACE, else ./workspace)."""
    return Path(chosen or os.environ.get("ODQA_WORKSPACE") or "workspace").expanduser().resolve()


def serve(workspace: Path, port: int | None, pool: str, deploy: bool) -> int:
    """Server (started if needed), pool, limit, deployments and a worker in the foreground."""
    from ...storage import Workspace

    print(f"odqa server: workspace {workspace}; starting its Prefect server if it is not running ...", flush=True)
    Workspace.resolve(workspace)  # the UI's runs may bring the first data in: a new or empty folder becomes one
    status = ensure_server(workspace, port=port)
    record = status.record
    if status.note:
        print(f"odqa server: {status.note}", flush=True)
    if port and record.port != port:
        print(f"odqa server: the server already runs on port {record.port} (not {port}); "
              f"`./run server stop` first to move it", flush=True)  # fmt: skip
    auth = client_auth_string(ServerPaths(workspace).home)
    env = prefect_env(record.api_url, workspace, auth_string=auth)
    slots, why = prepare(record.api_url, env, pool, deploy)
    paths = ServerPaths(workspace)
    worker_log = paths.log_dir / "worker.log"
    backend = workspace_database(workspace).describe()
    running = LocalPrefect(record.api_url, env)
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, _raise_stop)
    try:
        running.worker = worker = start_worker(env, pool, worker_log)
        write_foreground(workspace, worker.pid)
        print(f"odqa server: UI at {record.ui_url}  (API {record.api_url}, server pid {record.pid})", flush=True)
        print(f"odqa server: backend {backend}", flush=True)
        print(f"odqa server: work pool {pool!r} with a worker; {'deployments from prefect.yaml; ' if deploy else ''}"
              f"their runs use this workspace; {slots} gpu slot(s) on this machine ({why})", flush=True)  # fmt: skip
        print(f"odqa server: logs: server {paths.server_log}, worker {worker_log}", flush=True)
        print(f"odqa server: `odqa -w {workspace}` calls report here by themselves; other clients: "
              f"export PREFECT_API_URL={record.api_url}", flush=True)  # fmt: skip
        if auth is not None:
            print(f"odqa server: the API requires its auth string (ODQA_PREFECT_AUTH); the UI asks for it once: "
                  f"the contents of {ServerPaths(workspace).home / AUTH_FILE}", flush=True)  # fmt: skip
        print("odqa server: Ctrl-C (or SIGTERM, SIGHUP) stops the worker and leaves the server to CLI calls and the "
              "UI (it stops when idle for an hour, $ODQA_PREFECT_IDLE_S); `./run server stop` stops both",
              flush=True)  # fmt: skip
        identity = folder_identity(workspace)
        while worker.poll() is None:
            time.sleep(1)
            if folder_identity(workspace) != identity:  # its runs would write into a folder that is not its workspace
                print(f"odqa server: the workspace {workspace} was deleted or replaced; stopping the worker (its "
                      "server's watchdog stops the server)", file=sys.stderr, flush=True)  # fmt: skip
                return 1
        print(f"odqa server: the worker exited with code {worker.returncode}; see {worker_log}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, StopRequested) as stop:
        for stop_signal in STOP_SIGNALS:  # a second signal must not cut the stop short
            signal.signal(stop_signal, signal.SIG_IGN)
        running.stop_worker()
        if server_stops_too(workspace):
            print(f"\nodqa server: {stop or 'SIGINT'} from `./run server stop`: worker stopped; the server at "
                  f"{record.ui_url} is stopped next", flush=True)  # fmt: skip
        else:
            print(f"\nodqa server: {stop or 'SIGINT'}: worker stopped; the server keeps running at {record.ui_url} "
                  f"(`./run server stop` stops it)", flush=True)  # fmt: skip
        return 0
    finally:
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, signal.SIG_IGN)
        running.stop_worker()
        clear_foreground(workspace)


def status_lines(workspace: Path) -> list[str]:
    record = running_server(workspace)
    if record is None:
        stale = read_record(workspace)
        gone = f" (pid {stale.pid} recorded, not running; the next call starts it again)" if stale else ""
        return [f"no Prefect server runs for {workspace}{gone}"]
    watchdog = watch_workspace_server(workspace, record)
    return [f"Prefect server for {workspace}: UI {record.ui_url}, API {record.api_url}, pid {record.pid}, "
            f"since {record.started_at}", database_health(record),
            auth_status(record.api_url, ServerPaths(workspace).home, stop_command(workspace)), f"log: {record.log}",
            *([f"watchdog: it had none; started one (pid {watchdog})"] if watchdog else [])]


def list_lines() -> list[str]:
    """`./run server list`: every Prefect server odqa runs on this machine."""
    servers = watch_unwatched(project_servers())
    if not servers:
        return ["no Prefect server of odqa's runs on this machine"]
    rows = [f"{'pid':>8}  {'port':>5}  {'MB':>6}  watchdog  workspace"]
    for server in servers:
        where = (f"{server.workspace}{'' if server.workspace_exists else '  (FOLDER GONE: its watchdog stops it)'}"
                 if server.workspace else "(temporary server: tests or local_prefect)")  # fmt: skip
        watchdog = "started" if server.watchdog_started else "yes" if server.watchdog else "no"
        rows.append(f"{server.pid:>8}  {server.port or '?':>5}  {server.rss_mb:>6.0f}  {watchdog:<8}  {where}")
    rows.append(f"{len(servers)} server(s), {sum(s.rss_mb for s in servers):.0f} MB in all"
                + ("; watchdog 'started': it had none, one watches it now" if any(s.watchdog_started for s in servers)
                   else ""))  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["prefect"]:
        record = None if os.environ.get("PREFECT_API_URL") else running_server(workspace_of(None))
        if record is not None:  # `./run prefect ...` talks to the workspace's server
            os.environ["PREFECT_API_URL"] = record.api_url
            auth = client_auth_string(ServerPaths(workspace_of(None)).home)
            if auth is not None:
                os.environ["PREFECT_API_AUTH_STRING"] = auth
        return run_prefect_cli(argv[1:])
    parser = argparse.ArgumentParser(prog="./run server", description=__doc__.splitlines()[0],
                                     epilog="Ctrl-C stops the worker; `./run server stop` stops the server, "
                                            "`./run postgres stop` PostgreSQL.")  # fmt: skip
    parser.add_argument("action", nargs="?", default="start", choices=["start", "status", "stop", "reset", "list"],
                        help="start (default): server + deployments + worker; status; stop: stop the server "
                             "and a `./run server` running for it; reset: stop it and delete its database "
                             "(all runs and deployments); list: every odqa server on this machine")  # fmt: skip
    parser.add_argument("-w", "--workspace", default=None, help="workspace (default: $ODQA_WORKSPACE, else ./workspace)")
    parser.add_argument("--port", type=int, default=None, help="server port on 127.0.0.1 (default: 4200 when free)")
    parser.add_argument("--pool", default=POOL, help=f"process work pool name (default {POOL})")
    parser.add_argument("--no-deploy", action="store_true", help="do not run `prefect deploy --all`")
    args = parser.parse_args(argv)
    try:
        apply_umask()
    except ValueError as why:
        parser.error(str(why))
    workspace = workspace_of(args.workspace)
    if args.action == "status":
        print("\n".join(status_lines(workspace)))
        return 0
    if args.action == "list":
        print("\n".join(list_lines()))
        return 0
    if args.action == "stop":
        foreground = foreground_running(workspace)
        stopped = stop_server(workspace)
        if foreground is not None:
            print(f"odqa server: stopped `./run server` (pid {foreground['pid']}) and its worker "
                  f"(pid {foreground['worker_pid']})")  # fmt: skip
        print(f"odqa server: stopped the Prefect server of {workspace} (pid {stopped.pid})" if stopped
              else f"odqa server: no Prefect server was running for {workspace}")  # fmt: skip
        return 0
    if args.action == "reset":
        print(f"odqa server: {reset_server(workspace)}")
        return 0
    return serve(workspace, args.port, args.pool, deploy=not args.no_deploy)


if __name__ == "__main__":
    sys.exit(main())
