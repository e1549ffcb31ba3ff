"""``python -m odqa.flows.backend.guarded_prefect server start --host H --port P``: Prefect's own
``prefect server start``, with odqa's `Host` check in front of the app it serves.

Prefect answers any `Host`, so a page that rebinds its name to 127.0.0.1 could read the API and
the CSRF token the UI uses, and write with it (a `POST /api/variables/` from a foreign Host and
Origin answered 201). Prefect has no setting for it, so the server odqa starts (`local_server.
launch`) runs through this module: it wraps the app `prefect server start` hands to uvicorn in
`service.hosts.HostCheck`, allowing the loopback names, the address it listens on and the names
in ``$ODQA_PREFECT_ALLOWED_HOSTS`` (``*``: any). Only that app is wrapped: Prefect's in-process
clients of its own API (its services) call the cached app directly, with a Host of their own.

It also sets the process's umask (`file_modes`), since the server writes its home and log in the
workspace. The command line keeps ``prefect``, ``server`` and ``start``, by which odqa recognises
its servers in /proc (`local_server.is_prefect_server`).
"""

from __future__ import annotations

import sys
from typing import Any

from ...service.hosts import AllowedHosts, HostCheck, configured_hosts
from .file_modes import apply_umask

ALLOWED_HOSTS_ENV = "ODQA_PREFECT_ALLOWED_HOSTS"
DEFAULT_BIND = "127.0.0.1"


def allowed_hosts(argv: list[str]) -> AllowedHosts:
    """What the server started with ``argv`` (``server start --host H ...``) answers."""
    bind = argv[argv.index("--host") + 1] if "--host" in argv[:-1] else DEFAULT_BIND
    return AllowedHosts.for_bind(bind, configured_hosts(ALLOWED_HOSTS_ENV))


def guard_served_app(allowed: AllowedHosts) -> None:
    """Make `prefect server start` serve its app behind `HostCheck` (the app it creates with
    ``final=True``, the one it hands to uvicorn)."""
    import prefect.server.api.server as server

    create_app = server.create_app

    def guarded(*args: Any, **kwargs: Any) -> Any:
        app = create_app(*args, **kwargs)
        if not kwargs.get("final"):
            return app
        return HostCheck(app, allowed, setting=ALLOWED_HOSTS_ENV, error_key="detail")

    server.create_app = guarded  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    apply_umask()
    guard_served_app(allowed_hosts(args))
    from prefect.cli import app

    sys.argv = ["prefect", *args]
    try:
        app()
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
