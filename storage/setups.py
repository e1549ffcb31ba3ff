"""The papers' setups that `odqa reproduce` runs: one YAML file per setup, shipped in the package
(`storage/paper_setups/<name>.yaml`, package data of `odqa.storage`), read and checked here.

A setup names what to fetch (the `odqa fetch` registry's names, DPR's resource keys for DPR's
files), which question sets train and evaluate, the paper's hyper-parameters with where each one
comes from, the paper's reported figures with their table, the hardware the paper's scale expects
and a projected time worked out from `benchmarks/RESULTS.md`. A setup file is checked when read:
a figure without a source, a hyper-parameter without one, an unknown key, is refused naming the
file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SETUPS_DIR = Path(__file__).resolve().parent / "paper_setups"
SetupKind = Literal["taser-experiment", "dual-encoders", "desire-me"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PaperFigure(_Strict):
    """One number the paper reports, and which of the run's figures it is set beside."""

    retriever: str = Field(description="The run's retriever it compares with, as the side-by-side table labels it")
    paper_row: str = Field(description="The row (model) as the paper names it")
    metric: str = Field(description="odqa's metric name: R@20, macroR@20, nDCG@10, MRR@100, ...")
    dataset: str
    split: str
    value: float = Field(description="As the paper prints it")
    percent: bool = Field(description="The paper prints it in percent (odqa stores fractions)")
    source: str = Field(min_length=1, description="Paper, table and section it comes from")

    @property
    def fraction(self) -> float:
        return self.value / 100 if self.percent else self.value


class Projection(_Strict):
    """Hours the setup takes at the paper's scale on the stated hardware, and how they were worked out."""

    hours: float = Field(gt=0)
    basis: list[str] = Field(min_length=1, description="Each step: the RESULTS.md figure used and the arithmetic")


class Setup(_Strict):
    name: str
    title: str
    paper: str = Field(description="The paper's file under ../shared/papers (and its citation)")
    kind: SetupKind
    resources: list[str] = Field(min_length=1, description="`odqa fetch` registry names, fetched and imported")
    beir_splits: list[str] = Field(default_factory=list, description="Further qrels splits of the fetched BEIR "
                                   "folders to import (the registry's entries import their test split)")
    train: list[str] = Field(min_length=1, description="NAME:SPLIT[:WEIGHT] the retrievers train on")
    evaluate: list[str] = Field(min_length=1, description="NAME:SPLIT the figures are measured on")
    base: str = Field(description="Starting checkpoint (a Hugging Face name)")
    archs: list[str] = Field(default_factory=list, description="Architectures compared (dual-encoders)")
    reference: str | None = None
    recipe: dict[str, Any] = Field(default_factory=dict, description="rounds, mode, bm25_negatives, mine_depth, "
                                   "mine_count, holdout, routing")  # fmt: skip
    training: dict[str, Any] = Field(description="models.settings.TrainSettings fields")
    sources: dict[str, str] = Field(description="Where each hyper-parameter (recipe, training, base) comes from")
    figures: list[PaperFigure] = Field(min_length=1)
    hardware: str
    projected: Projection
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _every_value_has_a_source(self) -> Setup:
        named = {"base", *self.recipe, *self.training}
        missing = sorted(named - set(self.sources))
        if missing:
            raise ValueError(f"hyper-parameters without a source: {', '.join(missing)} (add them under `sources`)")
        unused = sorted(set(self.sources) - named)
        if unused:
            raise ValueError(f"`sources` names what the setup does not set: {', '.join(unused)}")
        return self

    @property
    def headline(self) -> str:
        """`--list`'s line: name, paper, hardware, projected time."""
        return f"{self.name}: {self.title} [{self.hardware}; about {self.projected.hours:g} h]"


def setup_names() -> list[str]:
    """The setups shipped with odqa."""
    return sorted(path.stem for path in SETUPS_DIR.glob("*.yaml"))


def read_setup_file(path: Path) -> Setup:
    """A setup file, checked; a malformed one is refused naming the file and what was expected."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not YAML: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a setup is a mapping of fields, got {type(data).__name__}")
    try:
        setup = Setup(**data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'setup'}: {e['msg']}" for e in error.errors())
        raise ValueError(f"{path}: {problems}") from None
    if setup.name != path.stem:
        raise ValueError(f"{path}: its name {setup.name!r} is not its file's name {path.stem!r}")
    return setup


def load_setup(name: str) -> Setup:
    """The shipped setup `name`; an unknown name is an error listing the known ones."""
    if name not in setup_names():
        raise ValueError(f"unknown setup {name!r}; the setups are: {', '.join(setup_names())}")
    return read_setup_file(SETUPS_DIR / f"{name}.yaml")
