"""Workspace storage: Parquet tables with atomic snapshot commits and a DuckDB catalog.

This package imports none of flows/, pipelines/ or models/: it only knows paths and formats.
"""

from .workspace import Workspace

__all__ = ["Workspace"]
