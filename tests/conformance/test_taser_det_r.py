"""TASER Det-R's forward pass equals microsoft/taser's `MoEBertModel` (`src/taser/models/moe_models.py`,
moe_type `mod3:fwd`, two experts, no inferred routing): the same weights in a 6-block BERT give
expert blocks at layers 2 and 5, and the [CLS] vectors of questions (expert 0) and passages
(expert 1) agree to 1e-6. The reference ran under transformers 4.36 (it does not import under 5);
odqa runs under the installed transformers."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch

from .conftest import reference_figures
from .tiny_models import tiny_bert_checkpoint

FIXTURE = reference_figures("taser_det_r.json")


def _tensor(stored: dict) -> torch.Tensor:
    values = np.frombuffer(base64.b64decode(stored["float32_le"]), dtype="<f4").copy()
    return torch.from_numpy(values).reshape(stored["shape"])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from odqa.models.retriever import create_retriever

    c = FIXTURE["config"]
    base = tiny_bert_checkpoint(tmp_path_factory.mktemp("taser-base"), hidden=c["hidden_size"],
                                layers=c["num_hidden_layers"], heads=c["num_attention_heads"],
                                intermediate=c["intermediate_size"], vocab_size=c["vocab_size"],
                                max_positions=c["max_position_embeddings"])  # fmt: skip
    model = create_retriever("taser", base, routing="det", num_experts=2)
    assert model.config.taser.specialized_layers == FIXTURE["expert_layers"] == [2, 5]
    state = {name: _tensor(value) for name, value in FIXTURE["weights"].items()}
    ours = {k for k, v in model.state_dict().items() if not k.endswith(("position_ids", "token_type_ids"))}
    assert ours == set(state)  # every parameter of odqa's model comes from the reference's
    model.load_state_dict(state, strict=False)
    return model.eval()


def test_det_r_forward_equals_the_reference(model):
    assert model.config.pooling == "cls" and model.config.similarity == "dot"  # DPR's [CLS], dot
    ids = torch.tensor(FIXTURE["input_ids"])
    inputs = {"input_ids": ids, "attention_mask": torch.tensor(FIXTURE["attention_mask"]),
              "token_type_ids": torch.zeros_like(ids)}  # fmt: skip
    with torch.no_grad():
        questions = model.embed_questions(inputs)
        passages = model.embed_passages(inputs)
    torch.testing.assert_close(questions, torch.tensor(FIXTURE["question_vectors"]), atol=1e-6, rtol=0)
    torch.testing.assert_close(passages, torch.tensor(FIXTURE["passage_vectors"]), atol=1e-6, rtol=0)
    assert float((questions - passages).abs().max()) > 0.1  # the two experts differ: the side matters
