"""Parameter counts against closed-form formulas (TASER paper Table 1: 128M vs 218M for BERT-base).

The models are built on the meta device from a bare BertConfig: only shapes matter here.
"""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig

from odqa.models.config import RetrieverConfig, TaserConfig
from odqa.models.retriever import build_retriever
from odqa.models.taser import specialized_layer_indices

SHAPES = {
    # name: (vocab, hidden, layers, intermediate, positions, types)
    "minilm": (30522, 384, 6, 1536, 512, 2),
    "bert-base": (30522, 768, 12, 3072, 512, 2),
}


def bert_parameters(vocab: int, hidden: int, layers: int, inner: int, positions: int, types: int) -> int:
    embeddings = (vocab + positions + types) * hidden + 2 * hidden
    attention = 4 * (hidden * hidden + hidden) + 2 * hidden
    ffn = expert_parameters(hidden, inner)
    return embeddings + layers * (attention + ffn)


def expert_parameters(hidden: int, inner: int) -> int:
    """W1, b1, W2, b2 and the residual LayerNorm of one FFN sub-layer."""
    return hidden * inner + inner + inner * hidden + hidden + 2 * hidden


def build(arch: str, shape: tuple[int, ...], **taser: object):
    vocab, hidden, layers, inner, positions, types = shape
    bert = BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        intermediate_size=inner,
        max_position_embeddings=positions,
        type_vocab_size=types,
        num_attention_heads=12,
    )
    config = RetrieverConfig(
        arch=arch,
        base=f"random-{arch}",
        backbone=bert.to_dict(),
        taser=TaserConfig(**taser) if arch.startswith("taser") else None,
    )
    with torch.device("meta"):
        return build_retriever(config, tokenizer=None)


@pytest.mark.parametrize("shape_name", sorted(SHAPES))
def test_bi_encoders_and_taser_match_closed_form(shape_name):
    shape = SHAPES[shape_name]
    vocab, hidden, layers, inner, _, _ = shape
    one = bert_parameters(*shape)
    specialized = len(specialized_layer_indices(layers, 2))
    assert specialized == layers // 3
    expert = expert_parameters(hidden, inner)

    assert build("sde", shape).parameter_count() == one
    assert build("ade", shape).parameter_count() == 2 * one
    assert build("dpr", shape).parameter_count() == 2 * one
    embeddings = (vocab + 512 + 2) * hidden + 2 * hidden
    assert build("ade-ste", shape).parameter_count() == 2 * one - embeddings
    assert build("ade-spl", shape).parameter_count() == 2 * one + hidden * hidden + hidden
    assert build("taser-shared", shape, num_experts=1).parameter_count() == one
    assert build("taser", shape).parameter_count() == one + specialized * expert
    for experts in (2, 4):
        routed = build("taser", shape, routing="seq", num_experts=experts).parameter_count()
        assert routed == one + specialized * ((experts - 1) * expert + hidden * experts + experts)


def test_bert_base_taser_is_059_of_the_two_tower_model():
    shape = SHAPES["bert-base"]
    taser = build("taser", shape).parameter_count()
    two_tower = build("dpr", shape).parameter_count()
    assert round(taser / 1e6) == 128
    assert round(two_tower / 1e6) == 218
    assert taser / two_tower == pytest.approx(0.59, abs=0.005)
    assert round(build("taser", shape, routing="seq", num_experts=4).parameter_count() / 1e6) == 166
