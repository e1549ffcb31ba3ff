"""fixtures/desire_me_query.json: DESIRE-ME's query side with pkasela/DESIRE-ME's own
`SpecialziedBiEncoder` (src/model/models.py).

    python tests/conformance/generate/desire_me_query.py DESIRE_ME_CHECKOUT > tests/conformance/fixtures/desire_me_query.json
"""

import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(sys.argv[1]) / "src"))
from model.models import SpecialziedBiEncoder
from transformers import BertConfig, BertModel

HIDDEN, DOMAINS = 8, 3
torch.manual_seed(29)
bert = BertModel(
    BertConfig(
        vocab_size=10,
        hidden_size=HIDDEN,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=8,
    )
)
ref = SpecialziedBiEncoder(bert, None, DOMAINS, normalize=False, specialized_mode="desireme")
names = {"cls_1": "gate.layers.0", "cls_2": "gate.layers.2", "cls_3": "gate.layers.4"}
for i in range(DOMAINS):
    names[f"query_specializer.{i}.query_embedding_changer_1"] = f"specializers.{i}.down"
    names[f"query_specializer.{i}.query_embedding_changer_4"] = f"specializers.{i}.up"
weights = {}
for name, value in ref.state_dict().items():
    module, kind = name.rsplit(".", 1)
    if module in names:
        weights[f"{names[module]}.{kind}"] = value.tolist()
query = torch.randn(4, HIDDEN)
query[3] *= 4.0  # a longer vector: the skip connection keeps its length, the mixture is unit
with torch.no_grad():
    logits = ref.cls(query)
    vector = ref.query_embedder(query, logits)
json.dump(
    {
        "hidden": HIDDEN,
        "domains": DOMAINS,
        "reference_names": {v: k for k, v in names.items()},
        "weights": weights,
        "query": query.tolist(),
        "gate_logits": logits.tolist(),
        "gate_probabilities": torch.sigmoid(logits).tolist(),
        "query_vector": vector.tolist(),
    },
    sys.stdout,
    indent=None,
)
