"""Models of a workspace: resolving `--model`, where model folders live, and registering them.

`--model` (and `--base`) everywhere is one of:

* a model id of the `models` table, whose folder is `<workspace>/models/<id>`;
* a local folder holding a model (any odqa or Hugging Face / sentence-transformers checkpoint);
* a Hugging Face model name (loaded by transformers; offline machines need it in the HF cache).

A query-side fine-tuned model carries `qsft.json` naming its passage-side model: its passages,
embeddings and index are that model's, because query-side fine-tuning keeps the passage encoder
and the index fixed. :class:`ModelRef` carries both sides.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from .atomic import atomic_write_json, replace_directory, slug
from .fingerprint import file_sha256, fingerprint
from .workspace import Workspace

QSFT_FILE = "qsft.json"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TRAINING_DIR = ".training"  # under models/: checkpoints of trainings not yet registered


@dataclass(frozen=True)
class ModelRef:
    """A resolved `--model`: where to load it from, its folder key, and its passage side."""

    name: str  # as given
    path: str  # folder or Hugging Face name to load
    key: str  # folder name under indexes/dense
    passage_name: str  # the model whose passage encoder made the index (itself unless QSFT)
    passage_path: str
    passage_key: str

    @property
    def shares_passage_side(self) -> bool:
        """True when the question encoder is also the passage encoder (not a QSFT model)."""
        return self.passage_path == self.path

    def passage_side(self) -> ModelRef:
        """The passage-side model as a reference of its own: what its embeddings and index are built with."""
        return ModelRef(self.passage_name, self.passage_path, self.passage_key, self.passage_name, self.passage_path,
                        self.passage_key)  # fmt: skip


def _folder_name(model_id: str) -> str:
    """A model id as a folder name under models/. New ids follow `storage.ids.check_model_id`;
    this only keeps any id (one an older odqa let in, too) from naming a folder elsewhere."""
    if not model_id or "/" in model_id or "\\" in model_id or "\0" in model_id or model_id.startswith("."):
        raise ValueError(f"model id {model_id!r} is not a folder name under models/ (no '/', not starting with '.')")
    return model_id


def model_dir(ws: Workspace, model_id: str) -> Path:
    return ws.models_dir / _folder_name(model_id)


def model_is_registered(ws: Workspace, model_id: str) -> bool:
    """The model's folder is complete (its config is written last, when it is registered)."""
    return (model_dir(ws, model_id) / "config.json").is_file()


def training_dir(ws: Workspace, model_id: str) -> Path:
    """Where the checkpoints of a training of `model_id` wait until it is registered."""
    return ws.models_dir / TRAINING_DIR / _folder_name(model_id)


def training_examples_file(ws: Workspace, model_id: str, role: str, dataset: str, split: str) -> Path:
    """Where a training of `model_id` keeps the examples of one set (`role`: train or dev)."""
    return training_dir(ws, model_id) / "data" / f"{role}-{slug(dataset)}-{slug(split)}.parquet"


def registered_key(model_id: str) -> str:
    """The folder key of a registered model id (its indexes and ledger names use it)."""
    return slug(model_id, "model")


def _resolve_one(ws: Workspace, model: str) -> tuple[str, str]:
    """(path to load, folder key) of a model id, folder or Hugging Face name."""
    registered = ws.models_dir / model
    if "/" not in model and not model.startswith(".") and (registered / CONFIG_FILE).is_file():
        return str(registered), registered_key(model)
    if ws.rows("models"):
        rows = ws.read_table("models", columns=["model_id", "path"], filter=pc.field("model_id") == model)
        if rows.num_rows:
            path = rows.column("path")[0].as_py()
            if not Path(path, CONFIG_FILE).is_file():
                raise FileNotFoundError(f"model {model!r} is registered at {path}, which holds no {CONFIG_FILE}")
            return path, registered_key(model)
    folder = Path(model).expanduser()
    if folder.is_dir():
        resolved = folder.resolve()
        return str(resolved), f"{slug(resolved.name, 'model')}-{fingerprint(str(resolved))[:8]}"
    if folder.exists() or not _HUB_NAME.fullmatch(model):
        raise FileNotFoundError(_not_a_model(ws, model, folder))
    return model, slug(model, "model")


# What Hugging Face accepts as a model name: `name` or `owner/name` of letters, digits, '-', '_'
# and '.', neither part starting or ending with '-' or '.' (huggingface_hub's repo id rule).
_HUB_PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_HUB_NAME = re.compile(rf"{_HUB_PART}(?:/{_HUB_PART})?")


def _not_a_model(ws: Workspace, model: str, folder: Path) -> str:
    """Why `model` names no model: a path that is missing or not a folder (before, a missing path
    reached huggingface_hub and failed deep in it with "Repo id must be in the form ...", after
    the index build had already recorded the model under indexes/dense/)."""
    what = "is a file, not a model folder" if folder.exists() else "does not exist"
    known = []
    if ws.rows("models"):
        known = sorted(ws.read_table("models", columns=["model_id"]).column("model_id").to_pylist())
    ids = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "") if known else "none"
    return (f"model {model!r} not found: {folder.absolute()} {what}, and it is neither a model id of this workspace "
            f"(known: {ids}) nor a Hugging Face model name ('name' or 'owner/name'). Give a model id, "
            "a folder holding a model (config.json), or a Hugging Face name")


@dataclass(frozen=True)
class PublicModelName:
    """How a model may be named in what leaves this machine (an export's model card)."""

    label: str  # the Hugging Face name, else the folder's own name: never a local path
    hub_name: str | None  # the Hugging Face name, where known


# A Hugging Face cache folder: models--<name> or models--<owner>--<name> (hub names hold no "--").
_HUB_CACHE_FOLDER = re.compile(r"models--(?P<name>.+)")


def public_model_name(name_or_path: str) -> PublicModelName:
    """A model given by hub name or folder (`resolve_model` makes folders absolute), named without
    its local path: a hub name as is, a folder of the Hugging Face cache by the hub name it caches,
    any other folder by its own name (a workspace model's folder is named after its model id)."""
    path = Path(name_or_path).expanduser()
    if not (path.is_absolute() or name_or_path.startswith(".") or "\\" in name_or_path or path.exists()):
        return PublicModelName(label=name_or_path, hub_name=name_or_path)
    parts = path.resolve().parts
    for folder, below in zip(parts, parts[1:], strict=False):
        cached = _HUB_CACHE_FOLDER.fullmatch(folder)
        if cached and below == "snapshots":
            hub_name = cached.group("name").replace("--", "/")
            return PublicModelName(label=hub_name, hub_name=hub_name)
    return PublicModelName(label=path.resolve().name, hub_name=None)


def resolve_model(ws: Workspace, model: str) -> ModelRef:
    """Resolve a model id, folder or Hugging Face name, with its passage side (see module doc)."""
    if not model:
        raise ValueError("no model given (a model id, Hugging Face name or folder)")
    path, key = _resolve_one(ws, model)
    marker = Path(path) / QSFT_FILE
    if marker.is_file():
        passage_model = json.loads(marker.read_text(encoding="utf-8"))["passage_model"]
        passage_path, passage_key = _resolve_one(ws, passage_model)
        return ModelRef(model, path, key, passage_model, passage_path, passage_key)
    return ModelRef(model, path, key, model, path, key)


def model_identity(path: str) -> Any:
    """What identifies a model's weights: file hashes of a local folder, else the hub name."""
    folder = Path(path)
    if not folder.is_dir():
        return path
    return {f: file_sha256(folder / f) for f in (CONFIG_FILE, WEIGHTS_FILE) if (folder / f).is_file()}


def newest_model(ws: Workspace) -> str | None:
    """The model id registered last, or None when the workspace has no models."""
    if not ws.rows("models"):
        return None
    table = ws.read_table("models", columns=["model_id", "created_at"])
    if table.num_rows == 0:
        return None
    newest = pc.sort_indices(table, sort_keys=[("created_at", "descending")])[0].as_py()
    return table.column("model_id")[newest].as_py()


def write_qsft_marker(folder: Path, passage_model: str, params: dict[str, Any]) -> None:
    """Mark a model folder as query-side fine-tuned from `passage_model` (see module doc)."""
    atomic_write_json(folder / QSFT_FILE, {"passage_model": passage_model, **params})


def register_model(
    ws: Workspace,
    model_id: str,
    source: Path,
    row: dict[str, Any],
    *,
    stage: str,
    stage_fingerprint: str,
    curve: list[dict[str, Any]] = (),  # type: ignore[assignment]
    leave_out: frozenset[str] = frozenset(),
    move: bool = False,
    report: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Put a written model folder at `models/<model_id>` and record it, in one atomic commit.

    The folder is copied (or moved, when `move`) into a hidden staging name first, without the
    files named in `leave_out` (optimizer state and the like), then swapped into place; the
    `models` row and the `training_log` curve are written in the same transaction, whose ledger
    report is `report` (default: the row without its config). Returns the row as registered (with path and created_at).
    """
    target = model_dir(ws, model_id)
    staging = ws.models_dir / f".{model_id}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        if move:
            source.rename(staging)
        else:
            shutil.copytree(source, staging, ignore=lambda _, names: [n for n in names if n in leave_out])
        replace_directory(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    created_at = datetime.now(timezone.utc)
    record = {**row, "model_id": model_id, "path": str(target), "created_at": created_at}
    with ws.transaction(stage, fingerprint=stage_fingerprint) as tx:
        tx.replace_source("models", model_id)
        tx.write("models", [record], source=model_id)
        tx.replace_source("training_log", model_id)
        if curve:
            tx.write("training_log", [{"model_id": model_id, **entry, "created_at": created_at} for entry in curve],
                     source=model_id)  # fmt: skip
        tx.report = report if report is not None else {k: v for k, v in record.items()
                                                        if k not in ("config", "created_at")}
    return record
