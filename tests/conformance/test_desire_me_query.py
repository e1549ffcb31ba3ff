"""DESIRE-ME's query side equals pkasela/DESIRE-ME's `SpecialziedBiEncoder` (`src/model/models.py`,
mode `desireme`, normalize False): for the same head weights and base query vectors, the gate's
logits (`cls`: h -> 2h -> 4h -> D, ReLU), its probabilities (sigmoid of the detached logits) and
the specialised query vector (`query_embedder`: normalize(sum_i p_i * specialiser_i(q)) + q)."""

from __future__ import annotations

import pytest
import torch

from odqa.models.desire_me import DesireMeRetriever

from .conftest import reference_figures
from .tiny_models import tiny_bert_checkpoint

FIXTURE = reference_figures("desire_me_query.json")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> DesireMeRetriever:
    from odqa.models.retriever import create_retriever

    base = tiny_bert_checkpoint(tmp_path_factory.mktemp("desire-me-base"), hidden=FIXTURE["hidden"])
    model = create_retriever("desire-me", base, domains=[f"d{i}" for i in range(FIXTURE["domains"])])
    state = {name: torch.tensor(value) for name, value in FIXTURE["weights"].items()}
    head = {k: v for k, v in model.state_dict().items() if k.startswith(("gate.", "specializers."))}
    assert set(head) == set(state)  # every head parameter of odqa's model comes from the reference
    model.load_state_dict(state, strict=False)
    return model.eval()


def test_query_side_equals_the_reference(model):
    query = torch.tensor(FIXTURE["query"])
    inputs = {"input_ids": torch.zeros(len(query), 1, dtype=torch.long),
              "attention_mask": torch.ones(len(query), 1, dtype=torch.long)}  # fmt: skip
    assert model.config.similarity == "dot"  # the reference's normalize=False
    with torch.no_grad():
        vector, logits = model.specialize(query, inputs)
    torch.testing.assert_close(logits, torch.tensor(FIXTURE["gate_logits"]), atol=1e-6, rtol=0)
    torch.testing.assert_close(
        torch.sigmoid(logits), torch.tensor(FIXTURE["gate_probabilities"]), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(vector, torch.tensor(FIXTURE["query_vector"]), atol=1e-6, rtol=0)
