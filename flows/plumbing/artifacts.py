"""Prefect artifacts: evaluation metrics as a table plus a markdown note that shows the plots, and
a train run's dev R@K with its loss curve.

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

from .report_text import applicable, format_value

EMBED_MAX_BYTES = 2_000_000
LISTED_STEPS = 12  # a loss curve of up to this many logged steps names each of them under the plot
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
            parts.append(embedded_image(path.name, mime, path.read_bytes()))
        parts.append(f"`{path}`")
    return "\n\n".join(parts) + "\n"


def embedded_image(name: str, mime: str, data: bytes) -> str:
    """Markdown of an image carried in the artifact itself (a ``data:`` URI)."""
    return f"![{name}](data:{mime};base64,{base64.b64encode(data).decode('ascii')})"


def training_markdown(model_id: str, dev: str | None, best: dict[str, Any], curve: Sequence[dict[str, Any]],
                      dev_history: Sequence[dict[str, Any]]) -> str:  # fmt: skip
    """A train run's artifact: the best dev R@K (ordered by K) and the loss curve with dev R@K."""
    from ...pipelines.training_plot import recall_keys, render_training_plot

    parts = [f"### Training of `{model_id}`"]
    if dev and best.get("metrics"):
        keys = recall_keys([best["metrics"]])
        parts.append(f"Dev R@K on `{dev}` (best at step {best.get('step')}), over the pool of the dev questions' "
                     "positive and hard negative passages, not the whole corpus:")  # fmt: skip
        parts.append("\n".join(["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys),
                                 "| " + " | ".join(f"{best['metrics'][k]:.4f}" for k in keys) + " |"]))  # fmt: skip
    else:
        parts.append("Dev R@K: none, `dev` was empty (no dev evaluation).")
    steps = [entry["step"] for entry in curve if entry.get("loss") is not None]
    if steps:
        history = dev_history if dev else []
        png = render_training_plot(curve, history, f"{model_id}: training loss{' and dev R@K' if history else ''} by step")
        parts.append(embedded_image(f"{model_id} loss curve", "image/png", png))
        shown = ", ".join(map(str, steps)) if len(steps) <= LISTED_STEPS else f"{steps[0]} to {steps[-1]}"
        parts.append(f"Training loss at {len(steps)} logged step{'s' if len(steps) != 1 else ''} ({shown}), so at "
                     f"every loss the run's log shows; the figures: `odqa sql \"SELECT step, loss FROM training_log "
                     f"WHERE model_id = '{model_id}' ORDER BY step\"`.")  # fmt: skip
    else:
        parts.append("No loss was logged (no optimizer step ran).")
    return "\n\n".join(parts) + "\n"


def publish_training(model_id: str, dev: str | None, best: dict[str, Any], curve: Sequence[dict[str, Any]],
                     dev_history: Sequence[dict[str, Any]]) -> bool:  # fmt: skip
    """Artifact `train-<model_id>` of a train run (`training_markdown`); nothing outside a run."""
    if not _in_run():
        return False
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(key=artifact_key(f"train-{model_id}"), description=f"Dev R@K and loss curve of {model_id}",
                             markdown=training_markdown(model_id, dev, best, curve, dev_history))  # fmt: skip
    return True


def publish_evaluation(run: str, plot: str | None, rows: list[dict[str, Any]]) -> bool:
    """Artifact of one `odqa evaluate` result: the run's overall metric rows and its R@K plot."""
    return publish_table(f"evaluation-{run}", f"Metrics of run {run}", rows, [plot] if plot else [])


def _cell(value: Any) -> Any:
    """A table cell as the reports show it (`flows.plumbing.report_text`): numbers as numbers,
    nested values as compact JSON of what applies, an empty cell for what does not."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, (int, str, bool)):
        return value
    shown = applicable(value)
    return "" if shown is None else format_value(shown)
