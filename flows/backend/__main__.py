"""`./run postgres start|stop|status` (``python -m odqa.flows.backend postgres ...``): the local
PostgreSQL cluster behind the Prefect servers (see `flows.backend.postgres`)."""

from __future__ import annotations

import argparse
import sys

from .postgres import PostgresUnavailable, local_cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./run postgres", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["postgres"], help=argparse.SUPPRESS)
    parser.add_argument("action", choices=["start", "stop", "status"],
                        help="start (creating the cluster on first use), stop, or status")  # fmt: skip
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
        users = cluster.databases_in_use() if cluster.running() else []
        stopped = cluster.stop()
        print(f"odqa postgres: {'stopped' if stopped else 'was not running'}: {cluster.describe()}")
        if users:
            print(f"odqa postgres: Prefect servers on {', '.join(users)} lost their database until it is "
                  f"started again (the next odqa call does that); `./run server stop` stops a workspace's server")
    else:
        pid = cluster.server_pid()
        state = f"running (pid {pid})" if pid else ("stopped" if cluster.created() else "not created yet")
        print(f"odqa postgres: {state}: {cluster.describe()}; log {cluster.log_path}")
        if pid:
            print("odqa postgres: databases: " + (", ".join(cluster.databases("odqa_")) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
