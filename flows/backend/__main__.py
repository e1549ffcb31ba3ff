"""`./run postgres start|stop|status` (``python -m flows.backend postgres ...``): the local
PostgreSQL cluster behind the Prefect servers (see `flows.backend.postgres`).

One cluster serves every workspace of the user (and the test sessions' servers), so `stop`
names the workspaces whose Prefect servers use it and refuses while any does; `--force` stops
it anyway (those servers answer errors until the next odqa verb starts it again)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flows.backend.postgres import Cluster, PostgresUnavailable, local_cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./run postgres", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["postgres"], help=argparse.SUPPRESS)
    parser.add_argument("action", choices=["start", "stop", "status"],
                        help="start (creating the cluster on first use), stop, or status")  # fmt: skip
    parser.add_argument("--force", action="store_true",
                        help="stop: stop the cluster even while Prefect servers use it")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        cluster = local_cluster()
    except PostgresUnavailable as why:
        print(f"odqa postgres: not available: {why}", file=sys.stderr)
        return 1 if args.action == "start" else 0
    if args.action == "start":
        started = cluster.ensure_running()
        print(f"odqa postgres: {'started' if started else 'already running'}: {cluster.describe()}")
    elif args.action == "stop":
        users = users_of(cluster) if cluster.running() else []
        if users and not args.force:
            print("odqa postgres: not stopped: these Prefect servers use the cluster:\n" + "\n".join(users) +
                  "\nodqa postgres: stop them first (`./run server stop -w WORKSPACE`), or stop it anyway with "
                  "`./run postgres stop --force`", file=sys.stderr)  # fmt: skip
            return 1
        stopped = cluster.stop()
        print(f"odqa postgres: {'stopped' if stopped else 'was not running'}: {cluster.describe()}")
        if users:
            print("odqa postgres: these servers lost their database until the next odqa verb starts it again:\n"
                  + "\n".join(users))  # fmt: skip
    else:
        pid = cluster.server_pid()
        state = f"running (pid {pid})" if pid else ("stopped" if cluster.created() else "not created yet")
        print(f"odqa postgres: {state}: {cluster.describe()}; log {cluster.log_path}")
        if pid:
            print("odqa postgres: databases:\n" + ("\n".join(database_lines(cluster)) or "  none"))
    return 0


def _where(name: str, workspaces: dict[str, Path]) -> str:
    folder = workspaces.get(name)
    if folder is None:
        return "a temporary server (tests, local_prefect)" if not name.startswith("odqa_ws_") else "workspace unknown"
    return f"workspace {folder}" + ("" if folder.is_dir() else " (folder gone)")


def users_of(cluster: Cluster) -> list[str]:
    """One line per database in use: its name and the workspace it holds."""
    workspaces = cluster.workspaces()
    return [f"  {name}: {_where(name, workspaces)}" for name in cluster.databases_in_use()]


def database_lines(cluster: Cluster) -> list[str]:
    """One line per odqa database: name, workspace, whether a server uses it now."""
    workspaces, in_use = cluster.workspaces(), set(cluster.databases_in_use())
    return [f"  {name}: {_where(name, workspaces)}{', in use' if name in in_use else ''}"
            for name in cluster.databases("odqa_")]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
