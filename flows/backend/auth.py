"""Prefect's auth string for the servers the project starts, for shared machines (docs/security.md).

A server on 127.0.0.1 is reachable by every user of the machine. With ``ODQA_PREFECT_AUTH=on``
a server the project starts requires HTTP basic auth on its API (Prefect's
``PREFECT_SERVER_API_AUTH_STRING``); its secret is made once per server home and kept in
``<home>/auth-string``, readable by its owner only. The project's clients send it
(``PREFECT_API_AUTH_STRING``: the CLI's flows, `./run server`'s deployments and worker, and
the project's own API calls); the UI asks for it once per browser.

A secret file beside a running server is used by clients whether or not the setting is on now,
so turning the setting off does not lock the project out of a server started with it.
"""

from __future__ import annotations

import os
import secrets
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Prefect is imported when a client is made, not by every CLI start
    from prefect.client.orchestration import PrefectClient

AUTH_ENV = "ODQA_PREFECT_AUTH"
AUTH_FILE = "auth-string"
USER = "odqa"


def auth_wanted() -> bool:
    """Whether servers started now require the auth string (``ODQA_PREFECT_AUTH``: on/1/true/yes)."""
    value = os.environ.get(AUTH_ENV, "").strip().lower()
    if value in ("", "0", "off", "false", "no"):
        return False
    if value in ("1", "on", "true", "yes"):
        return True
    raise ValueError(f"{AUTH_ENV}={os.environ[AUTH_ENV]!r}: expected on or off")


def server_auth_string(home: Path) -> str | None:
    """The auth string a server with PREFECT_HOME ``home`` is started with: None when the setting
    is off; else the one in ``home``/auth-string, made (owner-only) when there is none."""
    if not auth_wanted():
        return None
    path = home / AUTH_FILE
    if not path.is_file():
        home.mkdir(parents=True, exist_ok=True)
        fresh = path.with_name(f".{AUTH_FILE}-{os.getpid()}")
        descriptor = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(f"{USER}:{secrets.token_urlsafe(24)}\n")
        try:
            os.link(fresh, path)  # complete or absent, and a secret another process made first stays
        except FileExistsError:
            pass
        finally:
            fresh.unlink()
    return client_auth_string(home)


def client_auth_string(home: Path) -> str | None:
    """The auth string of the server whose PREFECT_HOME is ``home`` (None: it has none)."""
    try:
        return (home / AUTH_FILE).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def api_client(api_url: str, auth_string: str | None = None) -> PrefectClient:
    """A PrefectClient for ``api_url`` that sends ``auth_string``, else this process's
    ``PREFECT_API_AUTH_STRING`` (a client built from a URL does not read it by itself)."""
    from prefect.client.orchestration import PrefectClient
    from prefect.settings import PREFECT_API_AUTH_STRING

    configured = PREFECT_API_AUTH_STRING.value()
    chosen = auth_string or os.environ.get("PREFECT_API_AUTH_STRING") or (configured.get_secret_value()
                                                                          if configured else None)  # fmt: skip
    return PrefectClient(api_url, auth_string=chosen)


def auth_status(api_url: str, home: Path, stop: str = "odqa server stop") -> str:
    """One line for `odqa server status`: whether the running server requires the auth string,
    asked of the server itself (a GET without it: 401 when it is on), and whether the setting
    now in force differs from it (it takes effect when the server starts again: ``stop`` is the
    command that stops it)."""
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/admin/version", timeout=10):
            required = False
    except urllib.error.HTTPError as refused:
        required = refused.code == 401
    except (urllib.error.URLError, OSError, ValueError) as why:
        return f"auth string: unknown (the server did not answer: {why})"
    try:
        wanted = auth_wanted()
    except ValueError as why:
        wanted, note = required, f"; {why}"
    else:
        note = ""
    if wanted != required:
        note = (f"; {AUTH_ENV} is {'on' if wanted else 'off'} now, which takes effect when the server starts again "
                f"(`{stop}`)")  # fmt: skip
    if required:
        return f"auth string: on (the API answers 401 without the secret in {home / AUTH_FILE}){note}"
    return f"auth string: off (any user of this machine can call the API; {AUTH_ENV}=on turns it on){note}"
