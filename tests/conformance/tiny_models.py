"""A tiny random BERT checkpoint of a given shape, for loading reference weights into odqa models."""

from __future__ import annotations

from pathlib import Path


def tiny_bert_checkpoint(folder: Path, hidden: int, layers: int = 1, heads: int = 2, intermediate: int | None = None,
                         vocab_size: int = 24, max_positions: int = 16) -> str:  # fmt: skip
    """A BERT of this shape with a WordPiece tokenizer of `vocab_size` tokens, saved to `folder`."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {
        token: i for i, token in enumerate(specials + [f"w{i}" for i in range(vocab_size - len(specials))])
    }
    BertTokenizerFast(vocab=vocab, do_lower_case=True).save_pretrained(folder)
    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=intermediate or 2 * hidden, max_position_embeddings=max_positions,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip
    BertModel(config, add_pooling_layer=False).save_pretrained(folder, safe_serialization=True)
    return str(folder)
