"""Stage reports as people read them, one way everywhere: the `odqa` verbs print this text, the
flows write the same text to their run logs (the Prefect UI's log tab) and the artifacts' cells
use the same values.

The rules: a title line saying whether work was done, then ``key: value`` lines with the keys
right-aligned. What does not apply is left out rather than shown as ``None``/``null``: a field
that is None, and inside a nested setting (a dict such as a retriever's config) every None entry
and every entry left empty by that rule. Nested values are compact JSON, never a Python repr
(dataclasses and pydantic models are shown by their fields), a dict of metrics in the order of
its cut-offs (R@1, R@5, R@20, R@100); a dict longer than `INLINE_WIDTH` as JSON gets a line per
entry instead (``config.model: ...``), so no line runs on for hundreds of characters.

Nothing heavy is imported here: the command line reads this before it loads a stage.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # reports are dataclasses of storage.reports
    from collections.abc import Iterator

    from ...storage.reports import Report

INLINE_WIDTH = 100  # the longest nested dict shown on one line


def applicable(value: Any) -> Any:
    """`value` with what does not apply taken out: None entries of dicts and lists (at any
    depth), dicts and lists left empty by that, dataclasses and pydantic models turned into their
    fields. None when nothing of it applies."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    elif hasattr(value, "model_dump") and callable(value.model_dump):
        value = value.model_dump()
    if isinstance(value, dict):
        kept = {key: item for key, item in ((k, applicable(v)) for k, v in value.items()) if item is not None}
        return kept or None
    if isinstance(value, (list, tuple)):
        kept = [item for item in (applicable(v) for v in value) if item is not None]
        return kept or None
    return value


def format_value(value: Any) -> str:
    """One cell: lists and dicts as compact JSON (never cut: a config must stay readable whole),
    a dict of metrics in the order of their cut-offs, floats in 6 significant digits."""
    from ...storage.metrics import metric_order

    if isinstance(value, dict):
        value = {key: value[key] for key in sorted(value, key=lambda k: metric_order(str(k)))}
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _rows(key: str, value: Any) -> Iterator[tuple[str, str]]:
    """The ``(key, cell)`` rows of one figure: a long dict as a row per entry (``key.entry``)."""
    cell = format_value(value)
    if isinstance(value, dict) and len(cell) > INLINE_WIDTH:
        for entry in sorted(value, key=str):
            yield from _rows(f"{key}.{entry}", value[entry])
    else:
        yield key, cell


def report_table(figures: dict[str, Any]) -> str:
    """The figures as two aligned columns, ``key: value`` with the keys right-aligned (no header:
    the keys say what they are; scripts may still grep ``key: value``), without what does not
    apply (`applicable`)."""
    from tabulate import simple_separated_format, tabulate

    rows = [row for key, shown in ((k, applicable(v)) for k, v in figures.items()) if key != "noop" and shown is not None
            for row in _rows(key, shown)]  # fmt: skip
    if not rows:
        return ""
    table = tabulate(rows, tablefmt=simple_separated_format(": "), colalign=("right", "left"),
                     disable_numparse=True)  # fmt: skip
    return "\n".join(line.rstrip() for line in table.splitlines())


def report_text(title: str, report: Report) -> str:
    """A title line saying whether work was done, then the figures indented under it."""
    lines = [f"{title}: {'no-op (inputs unchanged)' if report.noop else 'done'}"]
    table = report_table(report.as_figures())
    lines += [f"  {line}" for line in table.splitlines()]
    return "\n".join(lines)


def log_report(title: str, report: Report) -> None:
    """The report in the run's logs (and the CLI's log file), as the CLI prints it."""
    from .runtime import stage_logger

    stage_logger().info("%s", report_text(title, report))
