"""Pickle-free training checkpoints that resume exactly.

A checkpoint folder is a complete model folder (config.json, model.safetensors, tokenizer)
plus:
- `optimizer.safetensors`: every tensor of the optimizer state, keyed `<param>.<name>`;
- `rng.safetensors`: torch CPU/CUDA generator states and numpy's MT19937 key;
- `trainer_state.json`: step, data position, scheduler, loss scaler, Python/numpy RNG
  scalars, optimizer scalars and param groups, best dev result and history.
Nothing is pickled, so loading a checkpoint cannot execute code.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from .backbone import refuse_pickles

OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"
CHECKPOINT_DIR = "checkpoint"  # where a training keeps its resumable checkpoint, inside its output folder
STATE_FILE = "trainer_state.json"


def optimizer_state_to_files(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split `optimizer.state_dict()` into safetensors-able tensors and JSON-able scalars."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param_id, values in state["state"].items():
        entry: dict[str, Any] = {}
        for name, value in values.items():
            if torch.is_tensor(value):
                key = f"{param_id}.{name}"
                tensors[key] = value.detach().to("cpu").contiguous().clone()
                entry[name] = {"tensor": key}
            else:
                entry[name] = {"value": value}
        scalars[str(param_id)] = entry
    return tensors, {"state": scalars, "param_groups": state["param_groups"]}


def optimizer_state_from_files(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for param_id, entry in meta["state"].items():
        state[int(param_id)] = {
            name: tensors[item["tensor"]] if "tensor" in item else item["value"]
            for name, item in entry.items()
        }
    return {"state": state, "param_groups": meta["param_groups"]}


def capture_rng() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for index, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{index}"] = state
    kind, keys, position, has_gauss, cached = np.random.get_state()
    tensors["numpy_keys"] = torch.from_numpy(np.asarray(keys, dtype=np.int64))
    version, python_state, gauss_next = random.getstate()
    scalars = {
        "numpy": {
            "kind": kind,
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "python": {"version": version, "state": list(python_state), "gauss_next": gauss_next},
    }
    return tensors, scalars


def restore_rng(tensors: dict[str, torch.Tensor], scalars: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["torch_cpu"])
    if torch.cuda.is_available():
        cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("torch_cuda_"))]
        if cuda:
            torch.cuda.set_rng_state_all(cuda)
    numpy_scalars = scalars["numpy"]
    np.random.set_state(
        (
            numpy_scalars["kind"],
            tensors["numpy_keys"].numpy().astype(np.uint32),
            numpy_scalars["position"],
            numpy_scalars["has_gauss"],
            numpy_scalars["cached"],
        )
    )
    python = scalars["python"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss_next"]))


def write_training_files(folder: Path, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Write optimizer, RNG and trainer state into an (already staged) checkpoint folder."""
    optimizer_tensors, optimizer_meta = optimizer_state_to_files(optimizer.state_dict())
    save_file(optimizer_tensors, str(folder / OPTIMIZER_FILE), metadata={"format": "pt"})
    rng_tensors, rng_scalars = capture_rng()
    save_file(rng_tensors, str(folder / RNG_FILE), metadata={"format": "pt"})
    document = {**state, "optimizer": optimizer_meta, "rng": rng_scalars}
    (folder / STATE_FILE).write_text(json.dumps(document, indent=1), encoding="utf-8")


def read_training_files(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trainer state (JSON) and the optimizer state_dict of a checkpoint; restores RNGs."""
    refuse_pickles(folder)
    state_file = folder / STATE_FILE
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{folder}: not a training checkpoint (no {STATE_FILE})") from error
    optimizer = optimizer_state_from_files(load_file(str(folder / OPTIMIZER_FILE)), state["optimizer"])
    restore_rng(load_file(str(folder / RNG_FILE)), state["rng"])
    return state, optimizer


def is_checkpoint(folder: Path) -> bool:
    return (Path(folder) / STATE_FILE).is_file()


def recover_checkpoint(folder: Path) -> bool:
    """Put back the newest complete checkpoint a kill left under a temporary name; True if found.

    A checkpoint is staged in ``.<name>.tmp-*`` and swapped in by two renames (the previous one
    to ``.<name>.old-*``, then the staged one into place). A kill between them leaves no
    ``folder`` but a complete checkpoint beside it (``trainer_state.json`` is written last, so
    its presence means complete). Leftover partial or older copies are removed.
    """
    folder = Path(folder)
    if not folder.parent.is_dir():
        return is_checkpoint(folder)
    leftovers = [p for p in folder.parent.glob(f".{folder.name}.*-*") if p.is_dir()]
    complete = [p for p in leftovers if is_checkpoint(p)]
    if not is_checkpoint(folder) and complete:
        def step_of(path: Path) -> int:
            return json.loads((path / STATE_FILE).read_text(encoding="utf-8"))["step"]

        newest = max(complete, key=step_of)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(newest, folder)
        leftovers.remove(newest)
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    return is_checkpoint(folder)
