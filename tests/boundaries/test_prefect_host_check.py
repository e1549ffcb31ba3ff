"""Issue 41: the Prefect server odqa starts answers only its own `Host` names (DNS rebinding).

A page whose name was rebound to 127.0.0.1 is same-origin with the server as far as the browser
knows, so CORS and CSRF do not stop it: it could read a CSRF token and write (a `POST
/api/variables/` with a foreign Host and Origin answered 201). Only the Host it sends, its own
name, gives it away. Runs against the session's server, started as every project server is
(`flows.backend.local_server.launch`)."""

from __future__ import annotations

import json
import uuid
from urllib.parse import urlsplit

from tests.boundaries.test_prefect_server import _call

FOREIGN = "rebound.example"


def _host(api_url: str, name: str) -> str:
    return f"{name}:{urlsplit(api_url).port}"


def _write_variable(api_url: str, host: str, origin: str) -> tuple[int, str]:
    """What a page at ``origin`` can do once it reads the API as ``host``: fetch a CSRF token,
    then create a variable with it; (status of the last step, its text)."""
    client = uuid.uuid4().hex
    status, _, text = _call(f"{api_url}/csrf-token?client={client}", Host=host, Origin=origin)
    if status != 200:
        return status, text
    token = json.loads(text)["token"]
    name = f"rebinding_probe_{uuid.uuid4().hex[:8]}"
    status, _, text = _call(f"{api_url}/variables/", "POST", {"name": name, "value": "written"}, Host=host,
                            Origin=origin, **{"Prefect-Csrf-Token": token, "Prefect-Csrf-Client": client})  # fmt: skip
    if status == 201:
        _call(f"{api_url}/variables/name/{name}", "DELETE", Host=host, Origin=origin,
              **{"Prefect-Csrf-Token": token, "Prefect-Csrf-Client": client})  # fmt: skip
    return status, text


def test_a_foreign_host_can_neither_read_nor_get_a_csrf_token_nor_write(prefect_harness: str) -> None:
    host = _host(prefect_harness, FOREIGN)
    status, text = _write_variable(prefect_harness, host, f"http://{host}")
    assert status == 421, f"a rebinding page got {status}: {text[:300]}"
    status, _, text = _call(f"{prefect_harness}/health", Host=host)
    assert status == 421 and "127.0.0.1" in text and "ODQA_PREFECT_ALLOWED_HOSTS" in text, (status, text[:300])
    status, _, text = _call(f"{prefect_harness.removesuffix('/api')}/", Host=host)  # the UI's page too
    assert status == 421, (status, text[:300])
    for own in ("127.0.0.1", "localhost"):  # the UI's own addresses still read, and write with a token
        host = _host(prefect_harness, own)
        assert _call(f"{prefect_harness}/health", Host=host)[0] == 200, own
        assert _write_variable(prefect_harness, host, f"http://{host}")[0] == 201, own


def test_which_hosts_a_bind_answers() -> None:
    """Names are compared without their port; a wildcard bind answers any IP address, never a name
    it was not given; ``*`` turns the check off."""
    from odqa.service.hosts import AllowedHosts, host_name

    assert host_name("[::1]:4200") == "[::1]" and host_name("LocalHost:80") == "localhost"
    loopback = AllowedHosts.for_bind("127.0.0.1", ["prefect.internal:8443"])
    assert all(loopback.allows(h) for h in ("127.0.0.1:4200", "localhost", "[::1]:4200", "prefect.internal"))
    assert not any(loopback.allows(h) for h in (f"{FOREIGN}:4200", "10.0.0.5:4200", "", None, "127.0.0.1.evil:1"))
    public = AllowedHosts.for_bind("0.0.0.0")
    assert public.allows("192.168.1.20:8000") and public.allows("[fe80::1]:8000") and not public.allows(FOREIGN)
    assert AllowedHosts.for_bind("127.0.0.1", ["*"]).allows(FOREIGN)
