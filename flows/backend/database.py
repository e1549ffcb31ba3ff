"""The database behind a Prefect server odqa starts, in this order:

1. ``PREFECT_SERVER_DATABASE_CONNECTION_URL`` (or its older name
   ``PREFECT_API_DATABASE_CONNECTION_URL``) in the environment: an existing PostgreSQL (or any
   database Prefect supports) that the user chose; used as is, for every server;
2. ``ODQA_PREFECT_BACKEND=sqlite``: SQLite, on purpose (benchmarks compare the two);
3. a database of its own in the local PostgreSQL cluster (`flows.backend.postgres`), created on
   first use and kept, so the server's runs outlive it;
4. SQLite, when PostgreSQL cannot be had, with one line saying why and what it costs.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from flows.backend.postgres import Cluster, PostgresUnavailable, local_cluster

URL_ENVS = ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")
BACKEND_ENV = "ODQA_PREFECT_BACKEND"
SQLITE_COST = ("SQLite makes a busy Prefect server answer 'database is locked' and can freeze every run "
               "for about 60 s (PostgreSQL does not; see docs/operations.md, Prefect backend)")  # fmt: skip


@dataclass(frozen=True)
class PrefectDatabase:
    """``url`` for ``PREFECT_SERVER_DATABASE_CONNECTION_URL``; ``kind``: postgresql (the local
    cluster), configured (the user's URL) or sqlite; ``note``: the line to show when it is SQLite."""

    url: str
    kind: str
    name: str
    cluster: Cluster | None = None
    note: str | None = None

    def describe(self) -> str:
        if self.kind == "postgresql" and self.cluster is not None:
            return f"PostgreSQL database {self.name} ({self.cluster.root})"
        if self.kind == "configured":
            return f"the database of ${URL_ENVS[0]} ({_without_password(self.url)})"
        return f"SQLite {self.name}"

    def server_env(self) -> dict[str, str]:
        return {URL_ENVS[0]: self.url}

    def drop(self) -> bool:
        """Delete the database (its runs, deployments, logs); False when there was nothing to drop
        or it is not ours to drop (a configured URL)."""
        if self.kind == "postgresql" and self.cluster is not None:
            return self.cluster.drop_database(self.name)
        if self.kind == "sqlite":
            removed = False
            for suffix in ("", "-wal", "-shm", "-journal"):
                path = Path(self.name + suffix)
                if path.exists():
                    path.unlink()
                    removed = True
            return removed
        return False


def database_name(key: Path | str, kind: str = "ws") -> str:
    """``odqa_<kind>_<folder name>_<hash of the full path>``: readable in ``psql -l``, unique per
    path, within PostgreSQL's 63 characters."""
    text = str(key)
    slug = re.sub(r"[^a-z0-9]+", "_", Path(text).name.lower()).strip("_")[:24] or "x"
    return f"odqa_{kind}_{slug}_{hashlib.sha1(text.encode()).hexdigest()[:10]}"


def configured_url() -> str | None:
    for name in URL_ENVS:
        if os.environ.get(name):
            return os.environ[name]
    return None


def sqlite_database(path: Path, note: str | None) -> PrefectDatabase:
    path.parent.mkdir(parents=True, exist_ok=True)
    return PrefectDatabase(url=f"sqlite+aiosqlite:///{path}", kind="sqlite", name=str(path), note=note)


def prefect_database(name: str, sqlite_path: Path) -> PrefectDatabase:
    """The database for a server (see the module docstring); starts the local cluster and creates
    ``name`` in it when that is the choice."""
    url = configured_url()
    if url:
        return PrefectDatabase(url=url, kind="configured", name=_without_password(url))
    if os.environ.get(BACKEND_ENV, "").lower() == "sqlite":
        return sqlite_database(sqlite_path, f"Prefect backend: SQLite at {sqlite_path} ({BACKEND_ENV}=sqlite); "
                                            f"{SQLITE_COST}")  # fmt: skip
    try:
        cluster = local_cluster()
        cluster.ensure_running()
        cluster.create_database(name)
    except (PostgresUnavailable, RuntimeError, OSError) as why:
        return sqlite_database(sqlite_path, f"PostgreSQL unavailable ({why}); Prefect falls back to SQLite at "
                                            f"{sqlite_path}: {SQLITE_COST}")  # fmt: skip
    return PrefectDatabase(url=cluster.url(name), kind="postgresql", name=name, cluster=cluster)


def _without_password(url: str) -> str:
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)
