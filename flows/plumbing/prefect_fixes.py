"""A fix for Prefect 3.8.8's client against its own server, applied where odqa calls the API.

The 3.8.8 client sends ``null`` for every unset field of a ``.../filter`` request body; the
3.8.8 server validates those bodies strictly and answers HTTP 422 (``'loc': ['body', 'limit']
... 'input': None``). Prefect's runtime paths fill their bodies in; its CLI and several client
methods do not.
"""

from __future__ import annotations


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
