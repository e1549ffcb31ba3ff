"""Reading back what flows published as Prefect artifacts, through the Prefect server's REST API."""

from __future__ import annotations


async def latest_artifact(key: str) -> dict:
    """The newest artifact with `key`, read through the REST API (a full filter body: the server's
    FastAPI refuses the nulls prefect's own `Artifact.get` sends)."""
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        response = await client._client.post(
            "/artifacts/filter",
            json={"artifacts": {"key": {"any_": [key]}}, "limit": 1, "offset": 0, "sort": "UPDATED_DESC"},
        )
        response.raise_for_status()
        found = response.json()
        return found[0] if found else {}
