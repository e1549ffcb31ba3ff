"""A private PostgreSQL cluster for the Prefect servers odqa starts: found, created once, started
when needed, stopped by one command (`./run postgres stop`).

Prefect's SQLite backend keeps the database's write lock across awaits and freezes a busy server
for 60 s at a time ("database is locked", see docs/operations.md, *Prefect backend*); Prefect documents
PostgreSQL (14.9 or newer, with `pg_trgm`) for real use. Debian's `postgresql` package has both;
`./run` installs it when it is missing and apt can be used.

The cluster lives in one folder, ``$ODQA_POSTGRES_DIR``, by default ``/var/lib/odqa/postgres`` for
root and ``${XDG_DATA_HOME:-~/.local/share}/odqa/postgres`` for anyone else::

    data/           the cluster (initdb; made under a temporary name and renamed, so a killed
                    initdb never leaves half a cluster)
    postgres.log    the server's log
    .s.PGSQL.5432   its Unix socket: the only way in (``listen_addresses = ''``, no TCP), mode 0700

``initdb`` and ``postgres`` refuse to run as root, so as root the cluster belongs to the
``postgres`` system user (``$ODQA_POSTGRES_USER``) and its commands go through ``runuser``. The
superuser role is named after that user and trusted on the socket, which only the owner (and
root) can open. Each Prefect server gets its own database in the cluster (see
`flows.backend.database`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pwd
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DIR_ENV = "ODQA_POSTGRES_DIR"
BIN_ENV = "ODQA_POSTGRES_BIN"
USER_ENV = "ODQA_POSTGRES_USER"
ROOT_DEFAULT = Path("/var/lib/odqa/postgres")
DEBIAN_LIB = Path("/usr/lib/postgresql")  # Debian's postgresql-NN packages: DEBIAN_LIB/NN/bin
MIN_VERSION = (14, 9)  # Prefect 3's minimum for its PostgreSQL backend
PORT = 5432  # only names the socket file: nothing listens on TCP
SOCKET_PATH_MAX = 100  # a Unix socket path must fit in 107 bytes
START_TIMEOUT_S = 120
ZOMBIE_WAIT_S = 10  # how long a killed postmaster and its backends may take to vanish
# Written into postgresql.conf by `Cluster.create`. synchronous_commit=off: a commit returns
# before its WAL reaches the disk. A killed process loses nothing; an OS crash can lose the last
# fraction of a second of Prefect's run states, never corrupt the database.
SETTINGS = {
    "listen_addresses": "''",
    "unix_socket_permissions": "0700",
    "max_connections": "200",
    "synchronous_commit": "off",
    "timezone": "'UTC'",
}
NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
WORKSPACE_MARK = "odqa workspace: "  # a database's comment: this, then the workspace's full path


class PostgresUnavailable(RuntimeError):
    """PostgreSQL cannot be had here; the message says why (one line)."""


def default_root() -> Path:
    """``$ODQA_POSTGRES_DIR``, else the documented default for this user."""
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV]).expanduser().absolute()
    if os.geteuid() == 0:
        return ROOT_DEFAULT
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home).expanduser().absolute() / "odqa" / "postgres"


def version_of(bin_dir: Path) -> tuple[int, int]:
    """(major, minor) of the ``postgres`` binary in ``bin_dir``."""
    out = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"(\d+)\.(\d+)", out)
    if not found:
        raise PostgresUnavailable(f"cannot tell the version of {bin_dir / 'postgres'} ({out.strip()!r})")
    return int(found.group(1)), int(found.group(2))


def find_bin_dir(major: int | None = None) -> Path:
    """The folder with ``initdb``/``pg_ctl``/``postgres``: ``$ODQA_POSTGRES_BIN``, else Debian's
    newest ``/usr/lib/postgresql/*/bin`` (the one of ``major`` when a cluster of that version
    exists), else ``pg_ctl`` on PATH."""
    candidates: list[Path] = []
    if os.environ.get(BIN_ENV):
        candidates.append(Path(os.environ[BIN_ENV]))
    debian = sorted(DEBIAN_LIB.glob("*/bin"), key=lambda p: _numeric(p.parent.name), reverse=True)
    if major is not None:
        debian = [p for p in debian if p.parent.name == str(major)]
    candidates += debian
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for bin_dir in candidates:
        if all((bin_dir / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres", "psql")):
            return bin_dir
    wanted = f"PostgreSQL {major}" if major is not None else "PostgreSQL"
    raise PostgresUnavailable(f"{wanted} is not installed (no initdb/pg_ctl; apt-get install postgresql, "
                              f"or set {BIN_ENV})")  # fmt: skip


def _numeric(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name)) or (0,)


def _owner() -> tuple[str, bool]:
    """(OS user that runs the cluster, whether commands must switch to it)."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name, False
    user = os.environ.get(USER_ENV, "postgres")
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise PostgresUnavailable(f"running as root and there is no '{user}' user to own the cluster "
                                  f"(initdb refuses root; set {USER_ENV})") from None  # fmt: skip
    if shutil.which("runuser") is None:
        raise PostgresUnavailable("running as root without `runuser` to start PostgreSQL as another user")
    return user, True


@dataclass(frozen=True)
class Cluster:
    """The cluster in ``root`` (see the module docstring), run by OS user ``owner``."""

    root: Path
    bin_dir: Path
    owner: str
    switch_user: bool

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    @property
    def socket_dir(self) -> Path:
        """The root, or a short folder under /tmp when the root's path is too long for a socket."""
        if len(str(self.root / f".s.PGSQL.{PORT}")) <= SOCKET_PATH_MAX:
            return self.root
        digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:10]
        return Path("/tmp") / f"odqa-pg-{os.geteuid()}-{digest}"

    @property
    def role(self) -> str:
        """The superuser role initdb created (named after the owner)."""
        return self.owner

    def url(self, database: str) -> str:
        """SQLAlchemy URL of ``database`` over the Unix socket, for Prefect's asyncpg driver."""
        return f"postgresql+asyncpg://{self.role}@/{database}?host={self.socket_dir}&port={PORT}"

    def describe(self) -> str:
        return f"PostgreSQL {'.'.join(map(str, version_of(self.bin_dir)))} in {self.root} (socket only)"

    # -- state ------------------------------------------------------------------------------
    def created(self) -> bool:
        return (self.data_dir / "PG_VERSION").is_file()

    def server_pid(self) -> int | None:
        """The postmaster's pid when it runs (its pid file names a live process and the socket exists)."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        if not _alive(pid) or not (self.socket_dir / f".s.PGSQL.{PORT}").exists():
            return None
        return pid

    def running(self) -> bool:
        return self.server_pid() is not None

    # -- actions ----------------------------------------------------------------------------
    def ensure_running(self) -> bool:
        """Create the cluster if needed and start it if it is not running; True when it was
        started by this call. Serialised by a lock file, so concurrent callers start it once."""
        with self._lock():
            if not self.created():
                self.create()
            if self.running():
                return False
            self._clear_killed_postmaster()
            self.start()
            return True

    def create(self) -> None:
        """initdb into a temporary folder, write SETTINGS, rename into place."""
        building = self.root / f"data.initdb-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        self._as_owner(["initdb", "-D", str(building), "-U", self.role, "--auth=trust", "-E", "UTF8",
                        "--locale=C"], "initdb", self.root / "initdb.log")  # fmt: skip
        settings = {**SETTINGS, "unix_socket_directories": f"'{self.socket_dir}'", "port": str(PORT)}
        with (building / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# odqa (flows/backend/postgres.py): socket only, private to its owner\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        building.rename(self.data_dir)

    def _clear_killed_postmaster(self) -> None:
        """Make way for a new postmaster after the last one was killed. PostgreSQL refuses to
        start while the pid in its lock files (``postmaster.pid``, and the socket's ``.lock``)
        exists, and a killed postmaster lingers as a zombie until its parent (init, here) reaps
        it; its backends exit by themselves a moment after it. Waits for both; when nothing but
        an unreaped zombie is left, its lock files are removed (no live process uses the data
        folder then, so nothing else can be harmed)."""
        pid = _lock_pid(self.data_dir / "postmaster.pid")
        if pid is None:
            return
        if _alive(pid):
            return  # a live postmaster without its socket: pg_ctl says what is wrong
        deadline = time.monotonic() + ZOMBIE_WAIT_S
        while time.monotonic() < deadline and (_exists(pid) or self._users()):
            time.sleep(0.1)
        users = self._users()
        if users:
            raise PostgresUnavailable(f"processes {users} of the killed postmaster still use {self.data_dir}")
        if _exists(pid):
            for lock in (self.data_dir / "postmaster.pid", self.socket_dir / f".s.PGSQL.{PORT}.lock"):
                if _lock_pid(lock) == pid:
                    lock.unlink()

    def _users(self) -> list[int]:
        """Live processes working in the data folder (a postmaster and its backends chdir there)."""
        found, data_dir = [], self.data_dir.resolve()
        for entry in Path("/proc").glob("[0-9]*/cwd"):
            with contextlib.suppress(OSError, ValueError):
                if Path(os.readlink(entry)) == data_dir and _alive(int(entry.parent.name)):
                    found.append(int(entry.parent.name))
        return found

    def start(self) -> None:
        if self.socket_dir != self.root:
            self._make_dir(self.socket_dir)
        self._as_owner(["pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_path), "-w",
                        "-t", str(START_TIMEOUT_S), "start"], "pg_ctl start", self.log_path)  # fmt: skip

    def stop(self) -> bool:
        """Stop the server (fast shutdown: open sessions are ended); False when it was not running."""
        with self._lock():
            if not self.running():
                return False
            self._as_owner(["pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop"], "pg_ctl stop",
                           self.log_path)  # fmt: skip
            return True

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run one SQL statement as the superuser; its rows, one per line, columns split by |."""
        done = subprocess.run(
            [str(self.bin_dir / "psql"), "-h", str(self.socket_dir), "-p", str(PORT), "-U", self.role,
             "-d", database, "-v", "ON_ERROR_STOP=1", "-X", "-A", "-t", "-q", "-c", sql],
            capture_output=True, text=True, check=False, cwd=self.root, env=_clean_env(),
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"psql on {database}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout.strip()

    def databases(self, prefix: str = "") -> list[str]:
        rows = self.psql("SELECT datname FROM pg_database WHERE NOT datistemplate ORDER BY datname")
        return [name for name in rows.splitlines() if name.startswith(prefix)]

    def databases_in_use(self) -> list[str]:
        """Databases with open sessions (other than this query's): the Prefect servers using them."""
        rows = self.psql("SELECT DISTINCT datname FROM pg_stat_activity WHERE datname IS NOT NULL "
                         "AND datname <> 'postgres' AND pid <> pg_backend_pid() ORDER BY 1")  # fmt: skip
        return rows.splitlines()

    def create_database(self, name: str) -> bool:
        """Create ``name`` (with ``pg_trgm``, which Prefect's migrations need) unless it exists;
        True when it was created."""
        _check_name(name)
        if name in self.databases():
            return False
        self.psql(f'CREATE DATABASE "{name}"')
        self.psql("CREATE EXTENSION IF NOT EXISTS pg_trgm", database=name)
        return True

    def set_workspace(self, name: str, workspace: Path) -> None:
        """Note in ``name``'s comment the workspace folder whose Prefect server it holds."""
        _check_name(name)
        self.psql(f"COMMENT ON DATABASE \"{name}\" IS {_literal(WORKSPACE_MARK + str(workspace))}")

    def workspaces(self) -> dict[str, Path]:
        """Database name -> the workspace folder it holds (databases with a workspace comment)."""
        rows = self.psql("SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database "
                         "WHERE NOT datistemplate")  # fmt: skip
        found: dict[str, Path] = {}
        for row in rows.splitlines():
            name, _, comment = row.partition("|")
            if comment.startswith(WORKSPACE_MARK):
                found[name] = Path(comment[len(WORKSPACE_MARK):])
        return found

    def drop_database(self, name: str) -> bool:
        """Drop ``name`` (ending its sessions first); False when it did not exist."""
        _check_name(name)
        if name not in self.databases():
            return False
        self.psql(f'DROP DATABASE "{name}" WITH (FORCE)')
        return True

    # -- helpers ----------------------------------------------------------------------------
    def prepare_root(self) -> None:
        self._make_dir(self.root)

    def _make_dir(self, path: Path) -> None:
        """``path``, owner-only, for the cluster's owner. Folders made above it stay traversable
        (0755, whatever odqa's umask): as root, the owner is another user who must reach it."""
        missing = [folder for folder in (path, *path.parents) if not folder.exists()][::-1]
        for folder in missing:
            folder.mkdir(exist_ok=True)
            if folder != path:
                folder.chmod(0o755)
        if self.switch_user:
            shutil.chown(path, user=self.owner)
        path.chmod(0o700)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.prepare_root()
        with open(self.root / ".odqa.lock", "a+") as handle:  # noqa: PTH123 (the handle holds the lock)
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _as_owner(self, argv: list[str], what: str, log: Path) -> None:
        command = [str(self.bin_dir / argv[0]), *argv[1:]]
        if self.switch_user:
            command = ["runuser", "-u", self.owner, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=self.root, env=_clean_env())
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip().splitlines()
            detail = output[-1] if output else f"exit code {done.returncode}"
            with contextlib.suppress(OSError), log.open("a", encoding="utf-8") as sink:
                sink.write(done.stdout + done.stderr)
            raise PostgresUnavailable(f"{what} failed: {detail} (see {log})")


def _alive(pid: int) -> bool:
    """A running process (a zombie counts as gone)."""
    if not _exists(pid):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def _lock_pid(lock: Path) -> int | None:
    """The pid on the first line of a PostgreSQL lock file (None: no such file)."""
    try:
        return int(lock.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def _exists(pid: int) -> bool:
    """Whether ``pid`` names any process, a zombie included (PostgreSQL's own test)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _clean_env() -> dict[str, str]:
    """The environment for PostgreSQL's tools, without PG* variables that would redirect them."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C"}


def _literal(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _check_name(name: str) -> None:
    if not NAME.match(name):
        raise ValueError(f"not a plain PostgreSQL database name: {name!r}")


def local_cluster(root: Path | None = None) -> Cluster:
    """The cluster of this user (see the module docstring); raises PostgresUnavailable with the
    reason when PostgreSQL cannot be had. Creates and starts nothing."""
    root = root or default_root()
    version_file = root / "data" / "PG_VERSION"
    major = int(version_file.read_text().strip()) if version_file.is_file() else None
    bin_dir = find_bin_dir(major)
    version = version_of(bin_dir)
    if version < MIN_VERSION:
        raise PostgresUnavailable(f"PostgreSQL {version[0]}.{version[1]} is older than the "
                                  f"{MIN_VERSION[0]}.{MIN_VERSION[1]} Prefect needs")  # fmt: skip
    owner, switch = _owner()
    return Cluster(root=root, bin_dir=bin_dir, owner=owner, switch_user=switch)
