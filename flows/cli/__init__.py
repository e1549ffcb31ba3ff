"""`odqa` command line. Each verb module registers its commands on import.

To add verbs: create `flows/cli/<area>.py` that imports `main` (or a sub-group) from
`flows.cli.groups` and decorates its commands, then add the module name to VERB_MODULES.
"""

from __future__ import annotations

import importlib

from flows.cli.groups import main

VERB_MODULES = [
    "ingest",
    "passages",
    "questions",
    "retrieval",
    "evaluation",
    "training",
    "dense",
    "sql",
    "demo",
    "categories",
    "serve",
    "recipe",
    "experiment",
]

for _name in VERB_MODULES:
    importlib.import_module(f"flows.cli.{_name}")

__all__ = ["main"]
