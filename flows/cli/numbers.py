"""Number options that refuse `nan` and `inf`.

Python's `float()` reads "nan", "inf" and "1e999" (which is inf), and click's FloatRange passes
them: nan is neither below nor above any bound, and inf is above every lower one. A learning
rate or a memory budget of inf is a run that trains to nan losses or sizes nothing, and no
option of odqa means "unbounded" by inf. So every float option parses through `FiniteRange`,
which refuses them while parsing, naming the option, before any server starts or work begins.
"""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteRange(click.FloatRange):
    """A click FloatRange (bounds optional) whose values must also be finite numbers."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


FINITE = FiniteRange()  # any finite float, unbounded
