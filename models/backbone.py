"""Loading Hugging Face encoders safely, and reading sentence-transformers pooling settings.

Every checkpoint is read with safetensors only: a local folder that contains a pickle-based file
is refused before anything is loaded, because unpickling runs arbitrary code. Hub names are
loaded with `use_safetensors=True`, which never falls back to `pytorch_model.bin`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import cached_file

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


class UnsafeCheckpointError(ValueError):
    """A checkpoint folder holds a pickle-based file; we refuse to load anything from it."""


def refuse_pickles(folder: Path) -> None:
    """Raise `UnsafeCheckpointError` if `folder` (recursively) contains a pickle-based file."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    found = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in PICKLE_SUFFIXES)
    if found:
        names = ", ".join(str(p) for p in found[:5])
        raise UnsafeCheckpointError(
            f"{folder}: refusing to load a checkpoint folder that contains pickle-based files "
            f"({names}); only safetensors weights are accepted. Convert the weights to "
            "safetensors and remove the pickle files."
        )


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' load reports (e.g. the unused BERT pooler) for the duration."""
    previous = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(previous)
        transformers.logging.enable_progress_bar()


def _without_pooler(kwargs: dict[str, Any], config: Any) -> dict[str, Any]:
    """BERT-family models take `add_pooling_layer`; the pooler is unused by retrieval, so drop it."""
    if getattr(config, "model_type", None) in ("bert", "roberta", "xlm-roberta", "electra", "ernie"):
        return {**kwargs, "add_pooling_layer": False}
    return kwargs


def load_pretrained_encoder(name_or_path: str) -> nn.Module:
    """The transformer body of a pretrained checkpoint (weights from safetensors only)."""
    refuse_pickles(Path(name_or_path))
    config = AutoConfig.from_pretrained(name_or_path)
    with quiet_transformers():
        return AutoModel.from_pretrained(
            name_or_path, config=config, use_safetensors=True, **_without_pooler({}, config)
        )


def build_encoder(backbone: dict[str, Any]) -> nn.Module:
    """A randomly initialised encoder from a stored HF config dict (weights are loaded after)."""
    config = backbone_config(backbone)
    with quiet_transformers():
        return AutoModel.from_config(config, **_without_pooler({}, config))


def backbone_config(backbone: dict[str, Any]) -> transformers.PretrainedConfig:
    fields = dict(backbone)
    model_type = fields.pop("model_type", None)
    if model_type is None:
        raise ValueError("stored backbone config has no model_type")
    return AutoConfig.for_model(model_type, **fields)


def encoder_config_dict(encoder: nn.Module) -> dict[str, Any]:
    """The encoder's HF config as plain JSON values (what config.json will hold after a reload)."""
    return json.loads(encoder.config.to_json_string(use_diff=False))


def load_tokenizer(name_or_path: str | Path) -> PreTrainedTokenizerBase:
    refuse_pickles(Path(name_or_path))
    return AutoTokenizer.from_pretrained(str(name_or_path))


@dataclass(frozen=True)
class SentenceTransformerSettings:
    pooling: str
    normalize: bool


def _checkpoint_file(name_or_path: str | Path, filename: str) -> Path | None:
    """A file of a local folder, or of a hub checkpoint (through the HF cache), or None."""
    folder = Path(name_or_path)
    if folder.is_dir():
        candidate = folder / filename
        return candidate if candidate.is_file() else None
    try:
        resolved = cached_file(str(name_or_path), filename, _raise_exceptions_for_missing_entries=False)
    except OSError:
        return None
    return Path(resolved) if resolved else None


def checkpoint_tensors(name_or_path: str, names: Collection[str]) -> dict[str, torch.Tensor]:
    """The tensors of `names` that a checkpoint's safetensors weights hold (one file or shards),
    read without loading the rest; empty when the checkpoint is not here (a folder that is gone,
    a hub name neither cached nor reachable) or holds none of them."""
    from safetensors import safe_open

    wanted = set(names)
    files: list[Path] = []
    single = _checkpoint_file(name_or_path, "model.safetensors")
    if single is not None:
        files.append(single)
    elif (index := _checkpoint_file(name_or_path, "model.safetensors.index.json")) is not None:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        for shard in sorted({weight_map[name] for name in wanted if name in weight_map}):
            if (found := _checkpoint_file(name_or_path, shard)) is not None:
                files.append(found)
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as weights:
            tensors.update({name: weights.get_tensor(name) for name in wanted & set(weights.keys())})
    return tensors


def checkpoint_available(name_or_path: str) -> bool:
    """Whether a model can be loaded from here: a folder, or a hub checkpoint in the HF cache (or
    on the hub, when online), that has its `config.json`. Checked before a run changes anything."""
    return _checkpoint_file(name_or_path, "config.json") is not None


def sentence_transformer_settings(folder: str | Path) -> SentenceTransformerSettings | None:
    """Pooling and normalisation declared by a sentence-transformers folder, or None.

    A folder qualifies when it has `modules.json` with a Pooling module; its `config.json`
    (`pooling_mode_cls_token` / `pooling_mode_mean_tokens`, or `pooling_mode: "cls" | "mean"` as
    sentence-transformers 5+ writes it) picks the pooling, and a Normalize
    module in `modules.json` means the model was trained for cosine similarity.
    """
    modules_file = _checkpoint_file(folder, "modules.json")
    if modules_file is None:
        return None
    try:
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{modules_file}: invalid JSON at line {error.lineno}: {error.msg}") from error
    pooling_modules = [m for m in modules if str(m.get("type", "")).endswith(".Pooling")]
    if not pooling_modules:
        return None
    pooling_name = f"{pooling_modules[0].get('path') or '1_Pooling'}/config.json"
    pooling_file = _checkpoint_file(folder, pooling_name)
    if pooling_file is None:
        raise ValueError(f"{modules_file}: declares a Pooling module but {pooling_name} is missing")
    pooling_config = json.loads(pooling_file.read_text(encoding="utf-8"))
    mode = pooling_config.get("pooling_mode")  # sentence-transformers >= 5: one "pooling_mode" string
    if pooling_config.get("pooling_mode_cls_token") or mode == "cls":
        pooling = "cls"
    elif pooling_config.get("pooling_mode_mean_tokens") or mode == "mean":
        pooling = "mean"
    else:
        modes = {k: v for k, v in pooling_config.items() if k.startswith("pooling_mode") and v}
        raise ValueError(f"{pooling_file}: unsupported pooling {modes}; expected CLS or mean tokens")
    normalize = any(str(m.get("type", "")).endswith(".Normalize") for m in modules)
    return SentenceTransformerSettings(pooling=pooling, normalize=normalize)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """Reduce token vectors to one vector per sequence: the [CLS] vector or the masked mean."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
    raise ValueError(f"unknown pooling {pooling!r}")
