"""`flows.plumbing.prefect_fixes.share_tls_context`: Prefect's clients share one verified TLS
context per CA file instead of parsing the CA bundle in every constructor, and Prefect's own
rules (a caller's ``verify``, PREFECT_API_TLS_INSECURE_SKIP_VERIFY) still apply."""

from __future__ import annotations

import ssl
from pathlib import Path

import certifi
from prefect.client.orchestration import PrefectClient, SyncPrefectClient
from prefect.settings import (
    PREFECT_API_SSL_CERT_FILE,
    PREFECT_API_TLS_INSECURE_SKIP_VERIFY,
    temporary_settings,
)

from odqa.flows.plumbing.prefect_fixes import context_for_settings, share_tls_context, verified_context

API = "http://127.0.0.1:9/api"  # never called: the tests only construct clients


def _context(client: PrefectClient | SyncPrefectClient) -> ssl.SSLContext:
    return client._client._transport._pool._ssl_context


def test_clients_share_one_context_per_ca_file(tmp_path) -> None:
    share_tls_context()
    share_tls_context()  # applying it again wraps nothing twice
    assert getattr(PrefectClient.__init__, "odqa_fixed", False)
    first, second, sync = PrefectClient(API), PrefectClient(API), SyncPrefectClient(API)
    shared = context_for_settings()  # the CA file Prefect would use: its setting, else certifi's
    assert shared is verified_context(PREFECT_API_SSL_CERT_FILE.value() or certifi.where())
    assert _context(first) is _context(second) is _context(sync) is shared
    assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname

    bundle = tmp_path / "ca.pem"
    bundle.write_text(Path(certifi.where()).read_text(encoding="ascii"), encoding="ascii")
    with temporary_settings({PREFECT_API_SSL_CERT_FILE: str(bundle)}):
        own = PrefectClient(API)
    assert _context(own) is verified_context(str(bundle)) is not shared


def test_a_callers_verify_and_the_insecure_setting_are_prefects_own() -> None:
    share_tls_context()
    mine = ssl.create_default_context()
    assert _context(PrefectClient(API, httpx_settings={"verify": mine})) is mine

    with temporary_settings({PREFECT_API_TLS_INSECURE_SKIP_VERIFY: True}):
        insecure = _context(PrefectClient(API))
    assert insecure.verify_mode == ssl.CERT_NONE and not insecure.check_hostname
    assert context_for_settings().verify_mode == ssl.CERT_REQUIRED  # the shared one untouched


class _Engine:
    """What the heartbeat context reads of Prefect's flow run engine, with the beats counted."""

    heartbeat_seconds = 3600  # the next beat an hour away: the thread is asleep when the run ends

    def __init__(self) -> None:
        import logging

        self.flow_run, self.beats, self.logger = None, [], logging.getLogger("test-heartbeats")

    def _build_heartbeat_event_template(self):  # noqa: ANN202
        return {"resource": 1}, []

    def _emit_flow_run_heartbeat(self, resource, related) -> None:  # noqa: ANN001
        self.beats.append(resource)


def test_a_flow_runs_heartbeat_beats_at_its_start_and_stops_with_it() -> None:
    import threading
    import time

    import prefect.flow_engine as engine_module

    from odqa.flows.plumbing import runtime  # noqa: F401 (every flow module imports it: the fix applied)
    from odqa.flows.plumbing.prefect_fixes import prompt_heartbeat_shutdown

    prompt_heartbeat_shutdown()  # applying it again changes nothing
    assert getattr(engine_module._send_heartbeats, "odqa_fixed", False)
    engine, before = _Engine(), threading.active_count()
    with engine_module._send_heartbeats(engine):
        deadline = time.monotonic() + 10
        while not engine.beats and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.beats == [{"resource": 1}]  # the first beat at the run's start, as Prefect's
        ended = time.monotonic()
    # Prefect 3.8.8's thread slept in 1 s steps, so the exit waited for up to a second
    assert time.monotonic() - ended < 0.5
    assert threading.active_count() == before  # the thread has ended, not been left behind
    engine.heartbeat_seconds = None  # heartbeats off: no thread at all
    with engine_module._send_heartbeats(engine):
        assert threading.active_count() == before
