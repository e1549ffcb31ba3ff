"""The Custom run forms refuse the numbers the command line refuses, with the same bounds.

Each numeric field of a deployment's form carries the bounds of its flow's signature
(`flows.plumbing.bounds`), which Prefect's server checks before a run is created. Where the
command line has the same option, its click range (or its check of passages per question) must
state the same bounds; and every numeric field has a lower bound, so `k: -5` or `keep: 0` is
refused in the form, not by a run that fails.
"""

from __future__ import annotations

from typing import Any

import click
import pytest

from tests.ops.test_forms_match_the_cli import VERBS, _cli_options, _deployments, _fields, _form

Bounds = tuple[Any, Any, bool, bool]  # (min, max, min open, max open); None: unbounded on that side
# fields whose values need no lower bound, and why
UNBOUNDED = {
    "loss_weights": "two weights >= 0 (similarity, auxiliary), refused otherwise by TrainSettings' own check",
}


def _numeric(prop: dict[str, Any]) -> dict[str, Any] | None:
    """The numeric variant of a field (the T of `T | None`, the items of a list of T), if any."""
    for variant in prop.get("anyOf") or [prop]:
        if variant.get("type") in ("integer", "number"):
            return variant
        if variant.get("type") == "array" and (variant.get("items") or {}).get("type") in ("integer", "number"):
            return variant["items"]
    return None


def _form_bounds(prop: dict[str, Any]) -> Bounds:
    low = ("exclusiveMinimum", True) if "exclusiveMinimum" in prop else ("minimum", False)
    high = ("exclusiveMaximum", True) if "exclusiveMaximum" in prop else ("maximum", False)
    return prop.get(low[0]), prop.get(high[0]), low[1] and low[0] in prop, high[1] and high[0] in prop


def _cli_bounds(option: click.Option) -> Bounds | None:
    """The option's range: a click range, or 1.. for `--k`/`--depth` (`passages_per_question`,
    whose upper limit, `ODQA_MAX_K`, is the worker's and is checked when the run starts)."""
    kind = getattr(option.type, "inner", option.type)  # (a number or `none`: settings_options.OrNone)
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        return kind.min, kind.max, bool(kind.min_open and kind.min is not None), bool(kind.max_open and kind.max is not None)
    if getattr(option.callback, "__name__", "") == "passages_per_question":
        return 1, None, False, False
    return None


@pytest.mark.parametrize("deployment", [d for d in _deployments() if d["name"] in VERBS], ids=lambda d: d["name"])
def test_each_numeric_field_has_the_command_lines_bounds(deployment: dict[str, Any]) -> None:
    schema = _form(deployment["entrypoint"])
    options, _ = _cli_options(VERBS[deployment["name"]])
    problems, seen = [], set()
    for path, prop, _, _ in sorted(_fields(schema, schema["properties"], schema.get("required") or [], {}),
                                   key=lambda field: len(field[0])):  # fmt: skip
        name = path[-1]
        option = None if name in seen else options.get(name)  # an option is the shallowest field of its name
        seen.add(name)
        numeric = _numeric(prop)
        if numeric is None:
            continue
        form = _form_bounds(numeric)
        if form[0] is None and name not in UNBOUNDED:
            problems.append(f"{'.'.join(path)}: no lower bound in the form")
        if option is None or prop.get("type") == "array" or "array" in [v.get("type") for v in prop.get("anyOf", [])]:
            continue  # (a list of cut-offs is one comma-separated option on the command line)
        cli = _cli_bounds(option)
        if cli != form:  # (1 == 1.0: an integer bound equals the same float bound)
            problems.append(f"{'.'.join(path)}: the form's bounds {form}, the command line's {cli}")
    assert not problems, f"{deployment['name']}:\n" + "\n".join(problems)


def test_bounds_are_read_as_stated() -> None:
    """The helpers read what they claim: a signature bound, a click range and a callback."""
    schema = _form("odqa.flows.compositions.reindex:reindex_flow")
    assert _form_bounds(schema["properties"]["keep"]) == (1, None, False, False)
    assert _form_bounds(schema["properties"]["memory_gb"]) == (0, None, True, False)
    options, _ = _cli_options(("retrieve",))
    assert _cli_bounds(options["k"]) == (1, None, False, False)
    assert _cli_bounds(options["b"]) == (0, 1, False, False)
    assert _cli_bounds(options["index_type"]) is None  # a choice, no range
