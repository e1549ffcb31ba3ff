"""Bi-encoder variants (dual-encoder paper section 3-4, thesis 4.2 and 5.1).

- `dpr` / `ade`: two separately parameterised towers (asymmetric dual encoder).
- `sde`: one encoder for both sides (siamese; the thesis' "1enc").
- `ade-ste`: two towers sharing the token embedder (the BERT embeddings module).
- `ade-fte`: two towers whose token embedder is frozen; both start from the same pretrained
  embeddings and never change, so one frozen copy is shared.
- `ade-spl`: two towers with one projection layer shared on top of both.
- `freeze="question"|"passage"`: thesis fixQ / fixP, one tower receives no updates.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from .backbone import pool
from .base import Inputs, Retriever, freeze
from .config import BI_ENCODER_ARCHS, RetrieverConfig


class TextTower(nn.Module):
    """A Hugging Face encoder followed by [CLS] or mean pooling."""

    def __init__(self, encoder: nn.Module, pooling: str) -> None:
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling

    def forward(self, inputs: Inputs) -> torch.Tensor:
        hidden = self.encoder(**inputs).last_hidden_state
        return pool(hidden, inputs["attention_mask"], self.pooling)


def embeddings_module(encoder: nn.Module) -> nn.Module:
    """The token embedder (word + position + type embeddings) of a BERT-like encoder."""
    module = getattr(encoder, "embeddings", None)
    if module is None:
        raise ValueError(f"{type(encoder).__name__} has no `embeddings` module to share or freeze")
    return module


def variance_scaling_linear(size_in: int, size_out: int) -> nn.Linear:
    """Projection initialised with fan-in variance scaling (dual-encoder paper, section 4)."""
    layer = nn.Linear(size_in, size_out)
    nn.init.trunc_normal_(layer.weight, std=1.0 / math.sqrt(size_in))
    nn.init.zeros_(layer.bias)
    return layer


class BiEncoder(Retriever):
    """Question and passage towers with the sharing pattern of `config.arch`."""

    def __init__(
        self, config: RetrieverConfig, tokenizer: PreTrainedTokenizerBase, encoder: nn.Module
    ) -> None:
        if config.arch not in BI_ENCODER_ARCHS:
            raise ValueError(f"BiEncoder cannot build arch {config.arch!r}")
        super().__init__(config, tokenizer)
        arch = config.arch
        hidden = encoder.config.hidden_size
        if arch == "sde":
            self.question_tower = TextTower(encoder, config.pooling)
            self.passage_tower = self.question_tower
        else:
            self.question_tower = TextTower(encoder, config.pooling)
            self.passage_tower = TextTower(copy.deepcopy(encoder), config.pooling)
        if arch in ("ade-ste", "ade-fte"):
            self.passage_tower.encoder.embeddings = embeddings_module(self.question_tower.encoder)
        if arch == "ade-fte":
            freeze(embeddings_module(self.question_tower.encoder))
        self.projection: nn.Module | None = None
        if arch == "ade-spl":
            size = config.projection_dim or hidden
            config.projection_dim = size
            self.projection = variance_scaling_linear(hidden, size)
        if config.freeze == "question":
            freeze(self.question_tower)
        elif config.freeze == "passage":
            freeze(self.passage_tower)
        self._dim = config.projection_dim if self.projection is not None else hidden

    @property
    def embedding_dim(self) -> int:
        return self._dim

    def _project(self, vectors: torch.Tensor) -> torch.Tensor:
        if self.projection is not None:
            vectors = self.projection(vectors)
        return self.finish_embedding(vectors)

    def embed_questions(self, inputs: Inputs) -> torch.Tensor:
        return self._project(self.question_tower(inputs))

    def embed_passages(self, inputs: Inputs) -> torch.Tensor:
        return self._project(self.passage_tower(inputs))
