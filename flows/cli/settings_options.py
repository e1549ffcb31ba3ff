"""Click options made from a settings model's fields (models/settings.py), so a verb's options
are the declaration: `--field-name` (or the field's `Cli` spelling), a `Literal` as a choice, a
bound as a range (an optional number whose default is not empty also takes `none`), a two-number
list as two values, a bool as a flag, the description as help."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import click
from annotated_types import Ge, Gt, Le, Lt, MaxLen
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from ...models.settings import Cli
from .numbers import FINITE, FiniteRange

F = TypeVar("F", bound=Callable[..., Any])


def _unwrap_optional(annotation: Any) -> Any:
    """T of `T | None` (else the annotation)."""
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _bound(info: FieldInfo, kind: type) -> Any | None:
    """`kind` constrained by the field's bounds (IntRange / FiniteRange), or None when unbounded."""
    limits: dict[str, Any] = {}
    for item in info.metadata:
        if isinstance(item, Ge):
            limits["min"] = item.ge
        elif isinstance(item, Gt):
            limits.update(min=item.gt, min_open=True)
        elif isinstance(item, Le):
            limits["max"] = item.le
        elif isinstance(item, Lt):
            limits.update(max=item.lt, max_open=True)
    if not limits:
        return None
    if kind is int:
        return click.IntRange(min=limits.get("min"), max=limits.get("max"))
    return FiniteRange(**limits)


class OrNone(click.ParamType):
    """A number, or the word `none` for a field that may be empty but has another default (so
    the default can be turned off: `--bucket-tokens none`)."""

    def __init__(self, inner: click.ParamType) -> None:
        self.inner = inner
        self.name = f"{inner.name} or none"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().lower() == "none":
            return None
        return self.inner.convert(value, param, ctx)


def field_option(name: str, info: FieldInfo, default: Any, required: bool,
                 choices: Iterable[str] | None = None) -> Callable[[F], F]:  # fmt: skip
    """One click option for the settings field `name` (a choice among `choices` where given)."""
    flag = next((m.flag for m in info.metadata if isinstance(m, Cli)), f"--{name.replace('_', '-')}")
    kind = _unwrap_optional(info.annotation)
    keywords: dict[str, Any] = {"help": info.description, "default": default, "required": required}
    if kind is bool:
        return click.option(flag, name, is_flag=True, **keywords)
    if get_origin(kind) is Literal:
        keywords["type"] = click.Choice(list(choices or get_args(kind)))
    elif get_origin(kind) is list:
        (item,) = get_args(kind)
        count = next(m.max_length for m in info.metadata if isinstance(m, MaxLen))
        keywords.update(type=(FINITE if item is float else item,) * count, metavar=" ".join([item.__name__.upper()] * count))
    elif kind in (int, float):
        keywords["type"] = _bound(info, kind) or (FINITE if kind is float else click.INT)
        if kind is not info.annotation and default is not None:
            keywords["type"] = OrNone(keywords["type"])
    keywords["show_default"] = default is not None
    return click.option(flag, name, **keywords)


def settings_options(model: type[BaseModel], *, defaults: dict[str, Any] | None = None,
                     optional: Iterable[str] = (), only: Iterable[str] | None = None,
                     exclude: Iterable[str] = (), choices: dict[str, Iterable[str]] | None = None,
                     ) -> Callable[[F], F]:  # fmt: skip
    """Add an option per field of `model` (or of its fields named in `only`, less `exclude`):
    its default, or `defaults`' for this verb; required where the model requires it, unless
    named in `optional`; a choice field offers only `choices`' values where it names the field."""
    defaults, optional, left_out, choices = defaults or {}, set(optional), set(exclude), choices or {}
    fields = [(n, i) for n, i in model.model_fields.items() if (only is None or n in only) and n not in left_out]

    def decorate(command: F) -> F:
        for name, info in reversed(fields):
            default = defaults.get(name, None if info.is_required() else info.get_default(call_default_factory=True))
            required = info.is_required() and name not in defaults and name not in optional
            command = field_option(name, info, default, required, choices.get(name))(command)
        return command

    return decorate


def settings_from(model: type[BaseModel], options: dict[str, Any]) -> Any:
    """The `model` click's values give (popped from `options`); a combination the model refuses
    is a usage error naming it."""
    values = {name: options.pop(name) for name in model.model_fields if name in options}
    try:
        return model(**values)
    except ValidationError as error:
        raise click.UsageError("; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors())) from None
