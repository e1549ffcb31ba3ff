"""Fixes for Prefect 3.8.8's client, applied where odqa calls the API.

The 3.8.8 client sends ``null`` for every unset field of a ``.../filter`` request body; the
3.8.8 server validates those bodies strictly and answers HTTP 422 (``'loc': ['body', 'limit']
... 'input': None``). Prefect's runtime paths fill their bodies in; its CLI and several client
methods do not.

And every client it creates parses the CA bundle again for a TLS context of its own.
"""

from __future__ import annotations

import ssl
from functools import lru_cache


def drop_null_filter_fields() -> None:
    """Work around Prefect 3.8.8's client sending ``null`` for unset fields (``limit``, ``sort``,
    ``flow_runs`` ...) in the body of ``.../filter`` requests, which the 3.8.8 server rejects
    (HTTP 422): `prefect deploy` asks for the pool's workers that way after each deployment (so
    `deploy --all` stopped after the first), and `prefect deployment ls` reads deployments and
    flows that way. Such keys are dropped, so the server's defaults apply."""
    from prefect.client.orchestration.base import BaseAsyncClient, BaseClient

    if getattr(BaseAsyncClient.request, "odqa_fixed", False):
        return
    sync_request, async_request = BaseClient.request, BaseAsyncClient.request

    def cleaned(path: str, kwargs: dict) -> dict:
        body = kwargs.get("json")
        if str(path).endswith("/filter") and isinstance(body, dict):
            kwargs["json"] = {k: v for k, v in body.items() if v is not None}
        return kwargs

    def request(self, method, path, params=None, path_params=None, **kwargs):
        return sync_request(self, method, path, params, path_params, **cleaned(path, kwargs))

    async def arequest(self, method, path, params=None, path_params=None, **kwargs):
        return await async_request(self, method, path, params, path_params, **cleaned(path, kwargs))

    arequest.odqa_fixed = True  # type: ignore[attr-defined]
    BaseClient.request = request  # type: ignore[method-assign]
    BaseAsyncClient.request = arequest  # type: ignore[method-assign]


def share_tls_context() -> None:
    """Give Prefect's clients one verified TLS context per CA file instead of one each. Prefect
    3.8.8 builds a new one in every client's constructor (the CA bundle parsed again: ~50 ms of
    CPU), even for the plain-HTTP API on 127.0.0.1: once per flow run in process (~30% of a
    small flow run's client CPU) and ~150 times in `prefect deploy --all` (7 of its 30 CPU-s).
    The contexts would be identical, and one context serves any number of connections.
    Prefect's own rules stay: a ``verify`` the caller passes is kept, and with
    PREFECT_API_TLS_INSECURE_SKIP_VERIFY Prefect builds its unverified context itself."""
    from prefect.client.orchestration import PrefectClient, SyncPrefectClient

    for client in (PrefectClient, SyncPrefectClient):
        if not getattr(client.__init__, "odqa_fixed", False):
            client.__init__ = _with_shared_tls_context(client.__init__)  # type: ignore[method-assign]


def _with_shared_tls_context(init):  # noqa: ANN001, ANN202  (a client class's __init__)
    def constructor(self, api, *args, httpx_settings=None, **kwargs):  # noqa: ANN001, ANN202
        settings = dict(httpx_settings or {})
        if "verify" not in settings:
            context = context_for_settings()
            if context is not None:
                settings["verify"] = context
        init(self, api, *args, httpx_settings=settings, **kwargs)

    constructor.odqa_fixed = True  # type: ignore[attr-defined]
    return constructor


def context_for_settings() -> ssl.SSLContext | None:
    """The shared context for the current settings (they may change within a process), None when
    Prefect is to skip verification."""
    import certifi
    from prefect.settings import PREFECT_API_SSL_CERT_FILE, PREFECT_API_TLS_INSECURE_SKIP_VERIFY

    if PREFECT_API_TLS_INSECURE_SKIP_VERIFY.value():
        return None
    return verified_context(PREFECT_API_SSL_CERT_FILE.value() or certifi.where())


@lru_cache(maxsize=8)
def verified_context(cafile: str) -> ssl.SSLContext:
    """A verified TLS context trusting ``cafile``, as Prefect's client builds it; built once."""
    return ssl.create_default_context(cafile=cafile)
