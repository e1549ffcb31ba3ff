"""ranxhub-style run cards: a YAML file beside an exported TREC run saying what made it.

ranxhub (and ranx's `Run.from_ranxhub`) describe a run by three sections: `run` (name, tags,
date), `benchmark` (dataset, split) and `model` (what retrieved). The card is written from the
run's ledger record, so it says exactly how the run was made. Every scalar is written as a JSON
string or number, which YAML reads as the same value, so no YAML library is needed.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...storage.atomic import atomic_write_text


def run_card(record: dict[str, Any], trec_path: str) -> dict[str, Any]:
    """The card of a run from its retrieve report (`RetrieveReport.ledger()`)."""
    config = dict(record.get("config") or {})
    retriever = record.get("retriever", "")
    return {
        "run": {"name": record.get("run", ""), "file": Path(trec_path).name, "format": "trec",
                "tags": ["odqa", retriever], "k": record.get("k"),
                "date": datetime.now(timezone.utc).strftime("%Y-%m-%d")},  # fmt: skip
        "benchmark": {"name": record.get("dataset", ""), "split": record.get("split", ""),
                      "queries": record.get("questions"),
                      "queries_without_results": record.get("questions_without_results")},  # fmt: skip
        "model": {"name": str(config.get("model") or retriever), "retriever": retriever, "config": config},
    }


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML for nested mappings; lists and scalars as JSON (valid YAML flow values)."""
    if not isinstance(value, dict) or not value:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    lines = []
    for key, item in value.items():
        prefix = " " * indent + json.dumps(str(key)) + ":"
        if isinstance(item, dict) and item:
            lines.append(prefix + "\n" + to_yaml(item, indent + 2))
        else:
            lines.append(prefix + " " + to_yaml(item))
    return "\n".join(lines)


def run_card_path(trec_path: Path) -> Path:
    """Where the card of a TREC file goes: `<trec file>.yaml`, beside it."""
    return Path(f"{trec_path}.yaml")


def write_run_card(record: dict[str, Any], trec_path: str, out: Path) -> Path:
    """Write the card of the TREC file at `trec_path` to `out` (its `run_card_path`, or where the
    caller stages it); returns `out`."""
    atomic_write_text(out, to_yaml(run_card(record, trec_path)) + "\n")
    return out
