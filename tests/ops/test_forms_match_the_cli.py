"""Every deployment's Custom run form offers what the command line offers: a parameter whose
values are a fixed list is a dropdown (the same `Literal` types the CLI's choices come from),
and every preset is the CLI's default (where the CLI has none, the form presets nothing).

The forms are read as `./run server` deploys them: Prefect's parameter schema of each flow of
prefect.yaml (`prefect.utilities.callables.parameter_schema`, through
`flows.plumbing.deployment_forms.typed_form`), with the deployment's own parameters on top."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from typing import Any

import click
import pytest
import yaml

from odqa.flows.plumbing.server import REPO_ROOT

# Each deployment's verb on the command line (the sample's `pipeline` has none: `odqa demo` runs it).
VERBS: dict[str, tuple[str, ...]] = {
    "ingest": ("ingest", "wikipedia"), "import-passages": ("import", "passages"),
    "import-questions": ("import", "questions"), "fetch": ("fetch",), "holdout": ("questions", "holdout"), "label": ("label", "domains"),
    "questions": ("questions", "trex"),
    "bm25-index": ("bm25", "index"), "negatives": ("negatives", "bm25"),
    "positives": ("positives", "bm25"), "train": ("train",), "mine": ("mine",),
    "index-build": ("index", "build"), "retrieve": ("retrieve",), "tune-hybrid": ("tune-hybrid",),
    "train-rounds": ("train-rounds",), "experiment-dual-encoders": ("experiment", "dual-encoders"),
    "experiment-taser": ("experiment", "taser"), "evaluate": ("evaluate",), "reindex": ("reindex",),
    "reproduce": ("reproduce",), "release-rollback": ("release", "rollback"),
}  # fmt: skip
# Where the form and the command line spell one default two ways, or differ on purpose.
SAME_DEFAULT_SPELLED_TWICE = {
    "ks": "comma-separated on the command line (1,5,20,100); the form's empty list means those cut-offs",
    "archs": "comma-separated on the command line; the form's empty list means the same architectures",
    "resume": "the command line's --resume/--restart given neither is the form's auto",
    "user_agent": "the command line leaves it to the flow's default, which the form shows",
}
DIFFERENT_ON_PURPOSE = {
    ("reindex", "wait_seconds"): "the weekly schedule's runs wait up to an hour for a re-index a command holds "
                                 "(the command line refuses at once)",
}  # fmt: skip


def _deployments() -> list[dict[str, Any]]:
    return yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text(encoding="utf-8"))["deployments"]


def _form(entrypoint: str) -> dict[str, Any]:
    """The parameter schema the deployment's Custom run form is drawn from."""
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameter_schema

    from odqa.flows.plumbing.deployment_forms import typed_form

    return typed_form(parameter_schema(load_flow_from_entrypoint(entrypoint)).model_dump())


def _model(schema: dict[str, Any], prop: dict[str, Any]) -> dict[str, Any] | None:
    """The settings model (a definition) a property is a form of, if it is one."""
    refs = [prop.get("$ref"), *(p.get("$ref") for p in prop.get("allOf", []) + prop.get("anyOf", []))]
    ref = next((r for r in refs if r), None)
    return schema["definitions"][ref.rsplit("/", 1)[-1]] if ref else None


def _fields(schema: dict[str, Any], props: dict[str, Any], required: list[str], preset: dict[str, Any],
            path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict[str, Any], bool, Any]]:  # fmt: skip
    """Every field of the form, settings groups opened: (path, property, required, preset or default)."""
    for name, prop in props.items():
        model = _model(schema, prop)
        given = preset.get(name) if isinstance(preset, dict) else None
        if model is not None:
            yield from _fields(schema, model.get("properties") or {}, model.get("required") or [], given or {},
                               (*path, name))  # fmt: skip
            continue
        shown = given if isinstance(preset, dict) and name in preset else prop.get("default")
        yield (*path, name), prop, name in required and not (isinstance(preset, dict) and name in preset), shown


def _choice_lists() -> list[tuple[str, set[str]]]:
    """Every fixed list of values the project declares: the `Literal` types of storage.choices,
    models.config and models.settings, and every click.Choice of the command line."""
    from odqa.flows.cli import main
    from odqa.models import config, settings
    from odqa.storage import choices

    found = [(f"{module.__name__}.{name}", set(typing.get_args(value)))
             for module in (choices, config, settings) for name, value in vars(module).items()
             if typing.get_origin(value) is typing.Literal]  # fmt: skip

    def walk(command: click.Command, where: str) -> None:
        for param in command.params:
            if isinstance(param.type, click.Choice):
                found.append((f"{where} --{param.name}", {str(c) for c in param.type.choices}))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{where} {name}")

    walk(main, "odqa")
    lists = [(name, values) for name, values in found if len(values) > 1]
    # a part of a longer list (DesireMeArch of Arch) names values in passing, not a field's alternatives
    return [(name, values) for name, values in lists if not any(values < other for _, other in lists)]


def _free_text(prop: dict[str, Any]) -> bool:
    """A text field without a fixed list of values (a plain one, or the text side of `T | None`)."""
    variants = prop.get("anyOf") or [prop]
    return any(v.get("type") == "string" and "enum" not in v for v in variants)


def _named(values: set[str], text: str) -> set[str]:
    """The values `text` names outside parenthetical remarks (`a question id (or a passage id)`
    mentions passages in passing, it does not offer them)."""
    while (shorter := re.sub(r"\([^()]*\)", "", text)) != text:
        text = shorter
    return {value for value in values if re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", text)}


def test_a_parameter_whose_description_lists_its_values_is_a_dropdown() -> None:
    """A free-text field whose description names every value of one of the project's choice
    lists (`fmt: dpr-tsv (...) or beir (...)`) is an enumeration typed as text: it must be a `Literal`."""
    choice_lists = _choice_lists()
    free_text = []
    for deployment in _deployments():
        schema = _form(deployment["entrypoint"])
        for path, prop, _, _ in _fields(schema, schema["properties"], schema.get("required") or [], {}):
            if not _free_text(prop):
                continue
            for source, values in choice_lists:
                named = _named(values, prop.get("description") or "")
                if named == values:
                    free_text.append(f"{deployment['name']}: {'.'.join(path)} is free text, its description names "
                                     f"{sorted(named)} of {source}")  # fmt: skip
                    break
    assert not free_text, "\n".join(free_text)


def test_the_forms_offer_the_command_lines_choices() -> None:
    """The dropdowns of the issue's fields list exactly what the command line accepts."""
    from odqa.flows.cli import main

    forms = {d["name"]: _form(d["entrypoint"]) for d in _deployments()}
    for deployment, command, name in [("import-passages", ("import", "passages"), "fmt"),
                                      ("import-passages", ("import", "passages"), "on_duplicate"),
                                      ("import-questions", ("import", "questions"), "fmt"),
                                      ("evaluate", ("evaluate",), "match"), ("mine", ("mine",), "mode")]:  # fmt: skip
        cli = main
        for word in command:
            cli = cli.commands[word]
        option = next(p for p in cli.params if p.name == name)
        assert forms[deployment]["properties"][name]["enum"] == list(option.type.choices), (deployment, name)


def _cli_options(path: tuple[str, ...]) -> tuple[dict[str, click.Option], dict[str, Any]]:
    """The verb's options and the values it takes when none is given (as click parses an empty
    command line; None: no default, the flow decides)."""
    from odqa.flows.cli import main

    command = main
    for word in path:
        command = command.commands[word]
    given = command.make_context(path[-1], [], resilient_parsing=True).params
    defaults = {name: (list(value) or None) if isinstance(value, tuple) else value for name, value in given.items()}
    return {p.name: p for p in command.params if isinstance(p, click.Option)}, defaults


@pytest.mark.parametrize("deployment", [d for d in _deployments() if d["name"] in VERBS], ids=lambda d: d["name"])
def test_presets_are_the_command_lines_defaults(deployment: dict[str, Any]) -> None:
    """Each form field the command line also has starts as the CLI's default (prefect.yaml's
    parameters over the flow's defaults); where the CLI requires the option or has no default,
    the form presets nothing."""
    schema = _form(deployment["entrypoint"])
    options, defaults = _cli_options(VERBS[deployment["name"]])
    differ, seen = [], set()
    fields = _fields(schema, schema["properties"], schema.get("required") or [], deployment.get("parameters") or {})
    for path, _, required, shown in sorted(fields, key=lambda field: len(field[0])):
        name = path[-1]
        option = None if name in seen else options.get(name)  # an option is the shallowest field of its name
        seen.add(name)
        if option is None or name in SAME_DEFAULT_SPELLED_TWICE or (deployment["name"], name) in DIFFERENT_ON_PURPOSE:
            continue
        expected = None if option.required else defaults.get(name)
        if option.required and not required:
            differ.append(f"{'.'.join(path)}: required on the command line, the form presets {shown!r}")
        elif expected is None and shown not in (None, []):
            differ.append(f"{'.'.join(path)}: no default on the command line, the form presets {shown!r}")
        elif expected is not None and shown != expected:
            differ.append(f"{'.'.join(path)}: the command line's default is {expected!r}, the form's {shown!r}")
    assert not differ, f"{deployment['name']}:\n" + "\n".join(differ)


def test_every_verb_has_its_deployment_and_each_exemption_a_field() -> None:
    """The map above stays true: each named verb exists, and every exempted field is one of its options."""
    names = {d["name"] for d in _deployments()}
    assert set(VERBS) == names - {"pipeline"}
    options = {name: set(_cli_options(path)[0]) for name, path in VERBS.items()}
    for name in SAME_DEFAULT_SPELLED_TWICE:
        assert any(name in found for found in options.values()), name
    for deployment, name in DIFFERENT_ON_PURPOSE:
        assert name in options[deployment], (deployment, name)


def test_settings_groups_are_opened_into_their_fields() -> None:
    """The walk reaches the fields of nested settings (the experiments' budget.training.max_steps)."""
    schema = _form("odqa.flows.compositions.experiments:taser_experiment_flow")
    paths = {path for path, *_ in _fields(schema, schema["properties"], schema.get("required") or [], {})}
    assert ("budget", "training", "max_steps") in paths and ("base",) in paths
