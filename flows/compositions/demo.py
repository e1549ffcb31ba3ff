"""`odqa demo`: the whole pipeline on the bundled sample, ending with the results table.

The demo is the `odqa_pipeline` flow with tiny training settings (see flows/compositions/pipeline.py), so it
doubles as a smoke test of every stage on two CPU cores; a second run finishes from cache.
"""

from __future__ import annotations

from prefect import flow

from ...storage import Workspace
from .pipeline import run_demo_pipeline


@flow(name="odqa-demo")
def demo_flow(workspace: str | None = None) -> None:
    """Run the pipeline on the bundled sample and print the results and example queries."""
    run_demo_pipeline(str(Workspace.resolve(workspace).root))
