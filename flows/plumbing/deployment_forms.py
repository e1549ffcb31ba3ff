"""The deployments' Custom run form in the Prefect UI: a typed field for every optional parameter.

Prefect builds each deployment's parameter schema from the flow's signature (types) and the
``Args:`` section of its docstring (descriptions). A parameter ``x: int | None = None`` becomes
``anyOf: [integer, null]`` with default null, which the 3.8 UI renders as an ``int | None``
switch set to None and the words 'Property is type "None"' instead of a field. Here such a
parameter is deployed as a plain typed field without a default: the form shows an empty integer
(text, number, list ...) input under its description, and a field left empty is left out of the
run's parameters, so the flow's own default (None, whose meaning the description gives) applies.
(The 3.8.8 UI sends no key for a field left empty or cleared, neither null nor "", and the server
fills a missing key from the deployment's parameters: so prefect.yaml presets no such parameter,
which tests/ops/test_deployments.py checks.)
Tri-state booleans (``bool | None``) keep their switch: an untouched toggle would send false.
"""

from __future__ import annotations

from typing import Any

NULL = {"type": "null"}


def typed_field(prop: dict[str, Any]) -> dict[str, Any]:
    """``prop`` with ``anyOf: [T, null]`` and default null made a plain field of type T (T not
    boolean); any other property unchanged."""
    choices = prop.get("anyOf")
    if not isinstance(choices, list) or len(choices) != 2 or NULL not in choices:
        return prop
    if "default" not in prop or prop["default"] is not None:
        return prop
    typed = next(choice for choice in choices if choice != NULL)
    if typed.get("type") == "boolean":
        return prop
    return {**{k: v for k, v in prop.items() if k not in ("anyOf", "default")}, **typed}


def typed_form(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter schema (a ``ParameterSchema`` dumped to a dict) with `typed_field` applied to
    its parameters and to the fields of its pydantic settings models (``definitions``)."""
    schema = dict(schema)
    schema["properties"] = {name: typed_field(prop) for name, prop in (schema.get("properties") or {}).items()}
    definitions = schema.get("definitions") or {}
    schema["definitions"] = {
        name: {**model, "properties": {f: typed_field(p) for f, p in (model.get("properties") or {}).items()}}
        if isinstance(model, dict) and "properties" in model else model
        for name, model in definitions.items()
    }  # fmt: skip
    return schema


def deploy_typed_forms() -> None:
    """Make `prefect deploy` (in this process) deploy `typed_form` schemas."""
    import prefect.cli.deploy._core as deploy_core
    from prefect.utilities.callables import ParameterSchema

    original = deploy_core.parameter_schema
    if getattr(original, "odqa_typed", False):
        return

    def parameter_schema(fn: Any) -> ParameterSchema:
        return ParameterSchema(**typed_form(original(fn).model_dump()))

    parameter_schema.odqa_typed = True  # type: ignore[attr-defined]
    deploy_core.parameter_schema = parameter_schema
