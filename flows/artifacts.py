"""Prefect artifacts: evaluation metrics as a table plus a markdown note that shows the plots.

Artifacts show up on the flow run's page in the Prefect UI (Artifacts tab) and under
Artifacts in the sidebar, keyed so the latest version of each is easy to find. Outside a flow
run (plain calls, tests without a server) nothing is published.

The plots are embedded in the markdown as ``data:`` URIs: the UI is a web page, and browsers
refuse to open the ``file://`` links an artifact could otherwise offer. A plot over
``EMBED_MAX_BYTES`` is named by its path only.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EMBED_MAX_BYTES = 2_000_000
IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


def artifact_key(name: str) -> str:
    """Prefect keys allow lower-case letters, digits and dashes only."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", name.lower())).strip("-")[:100] or "odqa"


def _in_run() -> bool:
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def publish_table(name: str, description: str, rows: list[dict[str, Any]], plots: Sequence[str | Path] = ()) -> bool:
    """A table artifact of `rows` and, when there are plots, a markdown artifact showing them."""
    if not _in_run() or not rows:
        return False
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    key = artifact_key(name)
    create_table_artifact(key=key, table=[{k: _cell(v) for k, v in row.items()} for row in rows],
                          description=description)
    if plots:
        create_markdown_artifact(key=f"{key}-plots", markdown=plots_markdown(plots), description=f"{description}: plots")
    return True


def plots_markdown(plots: Sequence[str | Path]) -> str:
    """Markdown showing each plot as an embedded image, with its path on disk under it."""
    parts = ["### Plots"]
    for plot in plots:
        path = Path(plot).resolve()
        mime = IMAGE_TYPES.get(path.suffix.lower())
        if mime and path.is_file() and path.stat().st_size <= EMBED_MAX_BYTES:
            parts.append(f"![{path.name}](data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')})")
        parts.append(f"`{path}`")
    return "\n\n".join(parts) + "\n"


def publish_evaluation(run: str, plot: str | None, rows: list[dict[str, Any]]) -> bool:
    """Artifact of one `odqa evaluate` result: the run's overall metric rows and its R@K plot."""
    return publish_table(f"evaluation-{run}", f"Metrics of run {run}", rows, [plot] if plot else [])


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    return value if isinstance(value, (int, str, bool)) or value is None else str(value)
