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
