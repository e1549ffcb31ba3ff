"""`Retriever`: the one interface that training, encoding and search code program against.

A retriever maps questions and passages to vectors whose inner product ranks passages:

- `encode_questions(texts, batch_size=64, device=None) -> np.ndarray[float32]`
- `encode_passages(titles, texts, batch_size=64, device=None) -> np.ndarray[float32]`
  (a passage is tokenized as the pair `title [SEP] text`, as in DPR)
- `embedding_dim`, `similarity` ("dot" or "cosine"; for cosine the vectors come back
  L2-normalised so an inner-product index computes cosine similarity)
- `config_fingerprint()`: a hash of the architecture config and the current weights, so
  stored embeddings can be recognised as stale when either changes.

Subclasses implement the differentiable `embed_questions` / `embed_passages` used in training
and the `forward` that also returns auxiliary losses (TASER routing entropy, DESIRE-ME gating
BCE). Everything is saved with `save_pretrained` as safetensors + config.json + tokenizer.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from torch import nn
from transformers import PreTrainedTokenizerBase

from ..pipelines.dense.passage_tokenizer import PassageTokenizer, passage_arguments
from ..pipelines.progress import progress
from ..storage.atomic import building_directory
from .buckets import Buckets, embed_rows
from .config import RetrieverConfig

Inputs = dict[str, torch.Tensor]
# Fast tokenizers keep per-call padding/truncation state: calls from several threads take turns.
_TOKENIZER_LOCK = threading.RLock()
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"


@dataclass
class RetrieverOutput:
    """Embeddings of one training batch plus the model's own auxiliary loss (already weighted)."""

    questions: torch.Tensor
    passages: torch.Tensor
    aux_loss: torch.Tensor | None = None
    stats: dict[str, float] = field(default_factory=dict)


class Retriever(nn.Module):
    """Base class of every dense retriever in odqa (see the module docstring for the contract)."""

    def __init__(self, config: RetrieverConfig, tokenizer: PreTrainedTokenizerBase) -> None:
        super().__init__()
        config.validate()
        self.config = config
        self.tokenizer = tokenizer

    # --- what subclasses provide -------------------------------------------------------------
    def embed_questions(self, inputs: Inputs) -> torch.Tensor:
        raise NotImplementedError

    def embed_passages(self, inputs: Inputs) -> torch.Tensor:
        raise NotImplementedError

    @property
    def embedding_dim(self) -> int:
        raise NotImplementedError

    def forward(
        self,
        question_inputs: Inputs | Buckets,
        passage_inputs: Inputs | Buckets,
        domain_targets: torch.Tensor | None = None,
    ) -> RetrieverOutput:
        """Training forward: embeddings of a batch (no auxiliary loss for plain bi-encoders)."""
        return RetrieverOutput(
            embed_rows(self.embed_questions, question_inputs), embed_rows(self.embed_passages, passage_inputs)
        )

    # --- the shared interface ----------------------------------------------------------------
    @property
    def similarity(self) -> str:
        return self.config.similarity

    @property
    def arch(self) -> str:
        return self.config.arch

    def finish_embedding(self, vectors: torch.Tensor) -> torch.Tensor:
        """Apply the scoring convention: cosine models return unit vectors."""
        if self.config.similarity == "cosine":
            return nn.functional.normalize(vectors, dim=-1)
        return vectors

    def tokenize_questions(self, texts: Sequence[str]) -> Inputs:
        with _TOKENIZER_LOCK:
            return dict(self.tokenizer(list(texts), padding=True, truncation=True,
                                       max_length=self.config.question_max_length, return_tensors="pt"))

    def passage_arguments(self, titles: Sequence[str], texts: Sequence[str]) -> tuple[list[str], ...]:
        """The tokenizer's text arguments for passages: the pair (titles, texts), or with
        `passage_input="joined-lowercase"` (DESIRE-ME's reference code) one string "title text"."""
        return passage_arguments(titles, texts, self.config.passage_input)

    def passage_tokenizer(self) -> PassageTokenizer | None:
        """What `tokenize_passages` does, as a picklable tokenizer whose fingerprint keys the
        stored token ids; None for a slow tokenizer (passages are then tokenized as before)."""
        key = (id(self.tokenizer), self.config.passage_input, self.config.passage_max_length)
        cached = self.__dict__.get("_passage_tokenizer")
        if cached is None or cached[0] != key:  # made once per tokenizer and settings: copying it costs ~0.1 s
            with _TOKENIZER_LOCK:
                cached = (key, PassageTokenizer.from_hf(self.tokenizer, *key[1:]))
            self.__dict__["_passage_tokenizer"] = cached
        return cached[1]

    def tokenize_passages(self, titles: Sequence[str], texts: Sequence[str]) -> Inputs:
        arguments = self.passage_arguments(titles, texts)
        with _TOKENIZER_LOCK:
            return dict(self.tokenizer(*arguments, padding=True, truncation="longest_first",
                                       max_length=self.config.passage_max_length, return_tensors="pt"))

    def question_token_rows(self, texts: Sequence[str]) -> dict[str, list[list[int]]]:
        """What `tokenize_questions` pads: token ids (and masks) per question, unpadded."""
        return dict(self.tokenizer(list(texts), truncation=True, max_length=self.config.question_max_length))

    def passage_token_rows(self, titles: Sequence[str], texts: Sequence[str]) -> dict[str, list[list[int]]]:
        """What `tokenize_passages` pads: token ids (and masks) per passage, unpadded."""
        arguments = self.passage_arguments(titles, texts)
        return dict(self.tokenizer(*arguments, truncation="longest_first", max_length=self.config.passage_max_length))

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def encode_questions(self, texts: list[str], batch_size: int = 64, device: str | torch.device | None = None,
                         show_progress: bool = True) -> np.ndarray:  # fmt: skip
        """Question vectors, float32 array of shape (len(texts), embedding_dim)."""
        lengths = [len(t) for t in texts]
        return self._encode(len(texts), lengths, lambda idx: self.tokenize_questions([texts[i] for i in idx]),
                            self.embed_questions, batch_size, device, "questions", show_progress)  # fmt: skip

    def encode_passages(self, titles: list[str], texts: list[str], batch_size: int = 64,
                        device: str | torch.device | None = None, show_progress: bool = True) -> np.ndarray:  # fmt: skip
        """Passage vectors (title [SEP] text), float32 array of shape (len(texts), embedding_dim)."""
        if len(titles) != len(texts):
            raise ValueError(f"got {len(titles)} titles for {len(texts)} passage texts")
        lengths = [len(a or "") + len(b) for a, b in zip(titles, texts, strict=True)]
        return self._encode(
            len(texts), lengths,
            lambda idx: self.tokenize_passages([titles[i] for i in idx], [texts[i] for i in idx]),
            self.embed_passages, batch_size, device, "passages", show_progress,
        )  # fmt: skip

    def _encode(self, count: int, lengths: list[int], tokenize: Callable[[list[int]], Inputs],
                embed: Callable[[Inputs], torch.Tensor], batch_size: int, device: str | torch.device | None,
                what: str, show_progress: bool) -> np.ndarray:  # fmt: skip
        """Encode in batches of similar lengths. Several threads may encode with one model at once
        (a search service does): tokenizers take a lock, and a model already in eval mode (as
        loaded) is never switched, so no thread changes state another one reads."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if device is not None:
            self.to(device)
        target = self.device
        # Longest first, so each batch pads to similar lengths; the order is undone on output.
        order = sorted(range(count), key=lambda i: -lengths[i])
        out = np.empty((count, self.embedding_dim), dtype=np.float32)
        was_training = self.training
        if was_training:
            self.eval()
        try:
            with torch.inference_mode(), progress(count, f"encode {what}", what, leave=False,
                                                  enabled=show_progress) as bar:  # fmt: skip
                for start in range(0, count, batch_size):
                    idx = order[start : start + batch_size]
                    inputs = {k: v.to(target) for k, v in tokenize(idx).items()}
                    out[idx] = embed(inputs).float().cpu().numpy()
                    bar.update(len(idx))
        finally:
            if was_training:
                self.train(True)
        return out

    def parameter_count(self, trainable_only: bool = False) -> int:
        """Distinct parameters (tensors shared between towers are counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def config_fingerprint(self) -> str:
        """SHA-256 over the config JSON and every weight's bytes (shared tensors hashed per name)."""
        digest = hashlib.sha256(self.config.to_json().encode("utf-8"))
        for name, tensor in sorted(self.state_dict().items()):
            digest.update(name.encode("utf-8"))
            data = tensor.detach().to("cpu").contiguous().reshape(-1)
            digest.update(str(data.dtype).encode("utf-8"))
            digest.update(data.view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write config.json + model.safetensors + tokenizer files; atomic (temp folder, rename)."""
        directory = Path(directory)
        with building_directory(directory) as staging:
            self.write_model_files(staging)
        return directory

    def write_model_files(self, folder: Path) -> None:
        """config.json, model.safetensors and the tokenizer, written into an existing folder."""
        (folder / CONFIG_NAME).write_text(self.config.to_json() + "\n", encoding="utf-8")
        # save_model de-duplicates tensors shared between towers (SDE, ADE-STE, ...).
        save_model(self, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
        self.tokenizer.save_pretrained(str(folder))

def load_weights(retriever: Retriever, weights: Path) -> None:
    """Load a model.safetensors into `retriever`, which must have exactly the same parameters."""
    if not Path(weights).is_file():
        raise FileNotFoundError(f"{weights}: weights file not found")
    missing, unexpected = load_model(retriever, str(weights), strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{weights}: weights do not match the {retriever.config.arch} architecture "
            f"(missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})"
        )


def freeze(module: nn.Module) -> None:
    for parameter in module.parameters():
        parameter.requires_grad_(False)
