"""No number option or form field takes nan or inf.

Python's float() reads "nan", "inf" and "1e999", and a plain bound passes them (nan compares
false with every bound, inf is above every lower one): `odqa train --lr inf` trained to a loss of
nan and registered the model as done. Every float option of every verb must parse through
`FiniteRange`, and the settings models and the flows' bounds refuse the same values. Seeds
likewise stay within the 32 bits numpy and scikit-learn take (`plot embeddings --seed 2**32`
failed inside t-SNE, after the embeddings were loaded).
"""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner
from pydantic import TypeAdapter, ValidationError

from odqa.flows.cli import main
from odqa.flows.cli.numbers import FiniteRange
from odqa.flows.plumbing import bounds
from odqa.models.settings import TrainSettings


def _commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        path = f"{prefix} {name}".strip()
        if isinstance(command, click.Group):
            yield from _commands(command, path)
        else:
            yield path, command


def _float_options() -> dict[str, list[click.ParamType]]:
    """Each float option of every verb (`verb --option`) and its value types."""
    found = {}
    for path, command in _commands(main):
        for option in command.params:
            kinds = option.type.types if isinstance(option.type, click.Tuple) else [option.type]
            kinds = [getattr(kind, "inner", kind) for kind in kinds]  # (a number or `none`: OrNone)
            if any(isinstance(kind, click.types.FloatParamType) for kind in kinds):
                found[f"{path} {option.opts[0]}"] = kinds
    return found


def test_every_float_option_parses_through_finite_range():
    options = _float_options()
    assert len(options) >= 20  # (the walk found the verbs' options: train alone has several)
    loose = [name for name, kinds in options.items() if not all(isinstance(k, FiniteRange) for k in kinds)]
    assert not loose, f"float options that take nan/inf: {loose}"


@pytest.mark.parametrize("arguments", [
    ["train", "--lr", "inf"], ["train", "--lr", "1e999"], ["train", "--temperature", "nan"],
    ["train", "--loss-weights", "nan", "1"], ["train", "--checkpoint-minutes", "inf"],
    ["index", "build", "--memory-gb", "inf"], ["retrieve", "--k1", "nan"], ["serve", "--max-wait-ms", "nan"],
], ids=lambda a: " ".join(a))  # fmt: skip
def test_the_command_line_refuses_nan_and_inf_naming_the_option(arguments, tmp_path):
    result = CliRunner().invoke(main, ["-w", str(tmp_path / "ws"), *arguments])
    assert result.exit_code == 2, result.output
    option = next(a for a in arguments if a.startswith("--"))
    assert f"Invalid value for '{option}'" in result.output and "is not a finite number" in result.output
    assert not (tmp_path / "ws").exists()  # refused while parsing: no workspace, no server


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_the_settings_and_the_flows_bounds_refuse_them(value):
    for field in ("lr", "temperature", "layer_decay", "checkpoint_minutes"):
        with pytest.raises(ValidationError, match="finite number|greater than|less than"):
            TrainSettings(**{field: value})
    with pytest.raises(ValidationError, match="finite number"):
        TrainSettings(loss_weights=[value, 1.0])
    for bound in (bounds.Positive, bounds.NotNegative, bounds.Share, bounds.UnitInterval):
        with pytest.raises(ValidationError):
            TypeAdapter(bound).validate_python(value)


def test_every_seed_takes_what_numpy_and_scikit_learn_take():
    seeds = {f"{path} --seed": option.type for path, command in _commands(main) for option in command.params
             if option.name == "seed"}  # fmt: skip
    assert len(seeds) >= 6  # train, train-rounds, the experiments, questions trex/paq/holdout, plot embeddings
    wrong = {name: kind for name, kind in seeds.items()
             if not (isinstance(kind, click.IntRange) and (kind.min, kind.max) == (0, 2**32 - 1))}  # fmt: skip
    assert not wrong, wrong
    assert TypeAdapter(bounds.Seed).validate_python(2**32 - 1) == 2**32 - 1
    with pytest.raises(ValidationError):
        TypeAdapter(bounds.Seed).validate_python(2**32)
    with pytest.raises(ValidationError):
        TrainSettings(seed=2**32)
