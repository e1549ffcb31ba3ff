"""An exported encoder with every module its architecture loads, so that loading it never warns.

odqa builds its encoders without the modules retrieval never uses (BERT's pooler:
`add_pooling_layer=False`, models/backbone.py), so odqa's model files do not hold them. Others
load an export with the architecture's defaults (`AutoModel.from_pretrained(folder)`, and
sentence-transformers' `Transformer`), which build those modules: missing weights would be
"newly initialized" with a warning, and at random, so `pooler_output` would differ between two
loads. The export therefore holds the full architecture, those modules taken

- from the base checkpoint, when it holds them: odqa never trains them, so they are what any
  fine-tuning that kept them (sentence-transformers', for one) would have saved;
- else (the base has none, or is no longer here) as the architecture initialises them, under a
  fixed seed: the same weights in every export of the model, and in every load of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from transformers import AutoModel

from .backbone import checkpoint_tensors, quiet_transformers

INIT_SEED = 0


@dataclass(frozen=True)
class CompleteEncoder:
    """The encoder as its architecture's default model, and where the modules it lacked came from."""

    model: nn.Module
    added: tuple[str, ...]  # weights odqa's encoder did not hold (e.g. pooler.dense.weight)
    source: Literal["base", "initialised"] | None  # None when nothing was added


def complete_encoder(encoder: nn.Module, base: str) -> CompleteEncoder:
    """`encoder` as `AutoModel` builds its config, the weights it lacks taken from `base` (see the
    module doc). Raises when `encoder` holds weights that the default model has no place for."""
    with torch.random.fork_rng(devices=[]), quiet_transformers():
        torch.manual_seed(INIT_SEED)
        model = AutoModel.from_config(encoder.config)
    missing, unexpected = model.load_state_dict(encoder.state_dict(), strict=False)
    if unexpected:
        raise ValueError(f"{type(model).__name__} has no place for the encoder's weights {sorted(unexpected)[:5]}")
    added = tuple(sorted(missing))
    if not added:
        return CompleteEncoder(model.eval(), added, None)
    expected = model.state_dict()
    prefix = f"{model.base_model_prefix}."  # a base saved with a head keys its body "bert.pooler..."
    found = checkpoint_tensors(base, [*added, *(prefix + name for name in added)])
    carried = {name: found.get(name, found.get(prefix + name)) for name in added}
    if all(t is not None and t.shape == expected[name].shape for name, t in carried.items()):
        model.load_state_dict({name: t.to(expected[name].dtype) for name, t in carried.items()}, strict=False)
        return CompleteEncoder(model.eval(), added, "base")
    return CompleteEncoder(model.eval(), added, "initialised")
