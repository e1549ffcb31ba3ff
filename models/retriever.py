"""Public entry points: the `Retriever` interface, `load_retriever` and `create_retriever`.

Encoding and search code only needs::

    from .retriever import Retriever, load_retriever
    retriever = load_retriever(path_or_name)           # any odqa model folder or HF/ST checkpoint
    q = retriever.encode_questions(texts)               # float32 (n, retriever.embedding_dim)
    p = retriever.encode_passages(titles, texts)        # "title [SEP] text", as DPR
    retriever.similarity                                # "dot" | "cosine" (vectors come normalised)
    retriever.config_fingerprint()                      # changes when config or weights change

A folder written by `Retriever.save_pretrained` is rebuilt from its config.json and loaded
from safetensors only; a plain Hugging Face or sentence-transformers checkpoint (folder or hub
name) becomes a zero-shot single-encoder (SDE) base retriever.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .backbone import (
    build_encoder,
    encoder_config_dict,
    load_pretrained_encoder,
    load_tokenizer,
    refuse_pickles,
    sentence_transformer_settings,
)
from .base import CONFIG_NAME, WEIGHTS_NAME, Retriever, RetrieverOutput, load_weights
from .config import (
    ARCHS,
    BI_ENCODER_ARCHS,
    DESIRE_ME_ARCHS,
    TASER_ARCHS,
    DesireMeConfig,
    RetrieverConfig,
    TaserConfig,
    is_retriever_config,
)
from .desire_me import DesireMeRetriever
from .encoders import BiEncoder
from .taser import TaserRetriever

__all__ = ["Retriever", "RetrieverOutput", "create_retriever", "load_retriever", "build_retriever"]


def _base_defaults(base: str, pooling: str | None, similarity: str | None) -> tuple[str, str]:
    """Pooling and similarity for a pretrained checkpoint: its sentence-transformers settings
    when it has them, otherwise [CLS] and dot product; explicit arguments win."""
    settings = sentence_transformer_settings(base)
    default_pooling = settings.pooling if settings else "cls"
    default_similarity = "cosine" if settings and settings.normalize else "dot"
    return pooling or default_pooling, similarity or default_similarity


def build_retriever(config: RetrieverConfig, tokenizer, encoder: torch.nn.Module | None = None) -> Retriever:
    """Modules for `config`; `encoder` is the pretrained body, or None to build it from config."""
    if config.arch in DESIRE_ME_ARCHS:
        base = build_retriever(config.base_retriever, tokenizer, encoder)
        return DesireMeRetriever(config, base)
    body = encoder if encoder is not None else build_encoder(config.backbone)
    if config.arch in BI_ENCODER_ARCHS:
        return BiEncoder(config, tokenizer, body)
    return TaserRetriever(config, tokenizer, body)


def create_retriever(
    arch: str,
    base: str,
    *,
    pooling: str | None = None,
    similarity: str | None = None,
    routing: str = "det",
    num_experts: int | None = None,
    shared_blocks: int = 2,
    entropy_beta: float = 0.01,
    domains: list[str] | None = None,
    freeze_base: bool = True,
    freeze: str | None = None,
    projection_dim: int | None = None,
    question_max_length: int = 64,
    passage_max_length: int = 256,
    passage_input: str = "pair",
) -> Retriever:
    """A new, untrained retriever of `arch` initialised from the pretrained checkpoint `base`.

    For `desire-me` / `rnd-g`, `base` may also be an odqa model folder (e.g. a trained DPR):
    the mixture is put on top of that retriever, and `domains` lists the domain labels.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS}")
    if arch in DESIRE_ME_ARCHS:
        if not domains:
            raise ValueError(f"{arch} needs the list of domain labels (questions.domains)")
        inner = load_retriever(base, pooling=pooling, similarity=similarity)
        config = RetrieverConfig(
            arch=arch,
            base=base,
            pooling=inner.config.pooling,
            similarity=inner.config.similarity,
            question_max_length=inner.config.question_max_length,
            passage_max_length=inner.config.passage_max_length,
            desire_me=DesireMeConfig(
                domains=list(domains),
                gate="random" if arch == "rnd-g" else "learned",
                freeze_base=freeze_base,
            ),
            base_retriever=inner.config,
            passage_input=passage_input,
        )
        return DesireMeRetriever(config, inner)
    pooling, similarity = _base_defaults(base, pooling, similarity)
    encoder = load_pretrained_encoder(base)
    taser = None
    if arch in TASER_ARCHS:
        experts = 1 if arch == "taser-shared" else (num_experts or 2)
        taser = TaserConfig(
            shared_blocks=shared_blocks,
            num_experts=experts,
            routing="det" if experts == 1 else routing,
            entropy_beta=entropy_beta,
        )
    config = RetrieverConfig(
        arch=arch,
        base=base,
        pooling=pooling,
        similarity=similarity,
        question_max_length=question_max_length,
        passage_max_length=passage_max_length,
        freeze=freeze,
        projection_dim=projection_dim,
        backbone=encoder_config_dict(encoder),
        taser=taser,
        passage_input=passage_input,
    )
    return build_retriever(config, load_tokenizer(base), encoder)


def load_retriever(
    path_or_name: str | Path, *, pooling: str | None = None, similarity: str | None = None
) -> Retriever:
    """Load an odqa model folder, or wrap a plain HF/sentence-transformers checkpoint as SDE.

    `pooling` / `similarity` only apply to plain checkpoints (an odqa folder fixes its own).
    Loading reads safetensors only and refuses folders that contain pickle files.
    """
    path = Path(path_or_name)
    refuse_pickles(path)
    config_file = path / CONFIG_NAME
    if path.is_dir() and is_retriever_config(config_file):
        config = RetrieverConfig.read(config_file)
        weights = path / WEIGHTS_NAME
        if not weights.is_file():
            raise FileNotFoundError(f"{path}: model folder has config.json but no {WEIGHTS_NAME}")
        retriever = build_retriever(config, load_tokenizer(path))
        load_weights(retriever, weights)
        retriever.eval()
        return retriever
    retriever = create_retriever("sde", str(path_or_name), pooling=pooling, similarity=similarity)
    retriever.eval()
    return retriever
