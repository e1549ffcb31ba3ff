"""`odqa` command line. Each verb module registers its commands on import.

One module per verb, named after it (`flows/cli/<verb>.py`); a verb group (ingest, import, index,
...) is declared in `flows.cli.groups`. To add a verb: create its module, decorate its command
with `main` or its group, then add the module name to VERB_MODULES.
"""

from __future__ import annotations

import importlib

from .groups import main

VERB_MODULES = [
    "init",
    "ingest",
    "imports",
    "fetch",
    "export",
    "questions",
    "label",
    "bm25",
    "negatives",
    "positives",
    "retrieve",
    "evaluate",
    "compare",
    "train",
    "encode",
    "index",
    "tune_hybrid",
    "search",
    "mine",
    "plot",
    "reindex",
    "release",
    "serve",
    "sql",
    "demo",
    "prefect_server",
    "recipe",
    "experiment",
    "reproduce",
]

for _name in VERB_MODULES:
    importlib.import_module(f"odqa.flows.cli.{_name}")

__all__ = ["main"]
