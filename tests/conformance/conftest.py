"""Fixtures of the conformance tests: figures computed by the papers' reference code (see README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


def reference_figures(name: str) -> Any:
    """The stored JSON fixture `name` (computed once from the reference code, not by odqa)."""
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))
