"""The on/off training options, read from their declaration (`TrainSettings`), for the tests that
check every one reaches the trainer through a verb: a new switch is covered without naming it."""

from __future__ import annotations

from odqa.models.settings import Cli, TrainSettings


def switched_on() -> tuple[list[str], dict[str, bool]]:
    """The CLI flags of every on/off option (a bool field, off by default), and what a model
    trained with all of them records for each."""
    names = [name for name, info in TrainSettings.model_fields.items() if info.annotation is bool and not info.default]
    flags = [next((m.flag for m in TrainSettings.model_fields[name].metadata if isinstance(m, Cli)),
                  f"--{name.replace('_', '-')}") for name in names]  # fmt: skip
    return flags, dict.fromkeys(names, True)
