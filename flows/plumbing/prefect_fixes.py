"""Fixes for Prefect 3.8.8's client, applied where odqa calls the API.

The 3.8.8 client sends ``null`` for every unset field of a ``.../filter`` request body; the
3.8.8 server validates those bodies strictly and answers HTTP 422 (``'loc': ['body', 'limit']
... 'input': None``). Prefect's runtime paths fill their bodies in; its CLI and several client
methods do not.

Every client it creates parses the CA bundle again for a TLS context of its own.

And every sync flow run (each subflow too) ends by joining its heartbeat thread, which sleeps in
1 s steps: up to a second of nothing at the end of each flow run.
"""

from __future__ import annotations

import contextvars
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any


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


def prompt_heartbeat_shutdown() -> None:
    """Make a flow run's end stop its heartbeat thread at once. Prefect 3.8.8's heartbeat thread
    sleeps in 1 s steps between beats and each sync flow run joins it on exit, so every flow run
    and subflow ended up to 1 s late: measured 1.10 s a trivial subflow on an idle server, 0.95 s
    of it in that join (a reproduce miniature runs dozens of subflows, a UI pipeline run one per
    stage). The replacement beats as Prefect's does (at the start, then every
    `PREFECT_FLOWS_HEARTBEAT_FREQUENCY` seconds, stopping once the run is final) but waits on the
    stop event, so the join returns as soon as the run ends."""
    import prefect.flow_engine as engine_module

    if getattr(engine_module._send_heartbeats, "odqa_fixed", False):
        return
    engine_module._send_heartbeats = _send_heartbeats  # type: ignore[assignment]


@contextmanager
def _send_heartbeats(engine: Any, join_on_exit: bool = True) -> Iterator[None]:
    """Prefect's `flow_engine._send_heartbeats`, with a stop that is noticed at once."""
    from prefect.flow_engine import MINIMUM_HEARTBEAT_INTERVAL

    seconds = engine.heartbeat_seconds
    if seconds is None:
        yield
        return
    seconds = max(seconds, MINIMUM_HEARTBEAT_INTERVAL)
    resource, related = engine._build_heartbeat_event_template()
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            state = engine.flow_run.state if engine.flow_run else None
            if state is not None and state.is_final():
                return
            try:
                engine._emit_flow_run_heartbeat(resource, related)
            except Exception:  # a missed beat is not the run's failure (as in Prefect)
                engine.logger.debug("Failed to emit heartbeat", exc_info=True)
            stop.wait(seconds)

    # the thread sees the caller's settings (its API URL), as in Prefect
    thread = threading.Thread(target=contextvars.copy_context().run, args=(beat,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        if join_on_exit:
            thread.join(timeout=2)


_send_heartbeats.odqa_fixed = True  # type: ignore[attr-defined]
