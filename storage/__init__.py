"""Workspace storage: Parquet tables with atomic snapshot commits and a DuckDB catalog.

This package imports none of flows/, pipelines/ or models/: it only knows paths and formats.
`Workspace` is imported on first use (PEP 562), so that a light module of this package
(`storage.choices`, read by the CLI) does not import pyarrow and DuckDB with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .workspace import Workspace

__all__ = ["Workspace"]


def __getattr__(name: str) -> Any:
    if name == "Workspace":
        from .workspace import Workspace

        return Workspace
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
