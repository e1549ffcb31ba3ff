"""Multi-set training lists: which (dataset, split) pairs to combine, and with what weight.

TASER and the thesis train on several datasets at once (NQ + T-REx, DPR's "Multi"); a run names
them as `NAME:SPLIT[:WEIGHT]`, e.g. `nq:train trex:train:0.5`. The weight scales how often a
dataset's questions are sampled relative to the others (1 = proportional to its size).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class DatasetSpec:
    dataset: str
    split: str
    weight: float = 1.0

    @classmethod
    def parse(cls, text: str, with_weight: bool = True) -> DatasetSpec:
        """`NAME:SPLIT` or (`with_weight`) `NAME:SPLIT:WEIGHT` (weight a positive number)."""
        parts = text.strip().split(":")
        if len(parts) not in ((2, 3) if with_weight else (2,)):
            expected = "NAME:SPLIT or NAME:SPLIT:WEIGHT" if with_weight else "NAME:SPLIT"
            raise ValueError(f"dataset spec {text!r} must look like {expected}")
        dataset, split = parts[0], parts[1]
        for what, value in (("dataset", dataset), ("split", split)):
            if not _NAME.match(value):
                raise ValueError(f"dataset spec {text!r}: {what} {value!r} must be letters, digits, '_', '-' or '.'")
        weight = 1.0
        if len(parts) == 3:
            try:
                weight = float(parts[2])
            except ValueError:
                raise ValueError(f"dataset spec {text!r}: weight {parts[2]!r} is not a number") from None
            if not (weight > 0 and math.isfinite(weight)):
                raise ValueError(f"dataset spec {text!r}: weight must be a positive number")
        return cls(dataset, split, weight)

    @property
    def name(self) -> str:
        """`NAME:SPLIT`, how runs, reports and training sets name the pair."""
        return f"{self.dataset}:{self.split}"

    def __str__(self) -> str:
        return f"{self.dataset}:{self.split}:{self.weight:g}"


def parse_dataset_specs(texts: Iterable[str]) -> list[DatasetSpec]:
    """Parse several specs; the same (dataset, split) twice is an error rather than a silent merge."""
    specs = [DatasetSpec.parse(t) for t in texts]
    seen: set[tuple[str, str]] = set()
    for spec in specs:
        if (spec.dataset, spec.split) in seen:
            raise ValueError(f"dataset {spec.dataset}:{spec.split} is listed twice")
        seen.add((spec.dataset, spec.split))
    return specs
