"""fixtures/taser_det_r.json: TASER Det-R's forward pass with microsoft/taser's own `MoEBertModel`
(src/taser/models/moe_models.py) under transformers 4.36 (the reference does not import under 5):

    pip install --target TF4 transformers==4.36.2
    python tests/conformance/generate/taser_det_r.py TASER_CHECKOUT TF4 > tests/conformance/fixtures/taser_det_r.json
"""

import base64
import json
import pathlib
import sys

sys.path[:0] = [sys.argv[2], str(pathlib.Path(sys.argv[1]) / "src/taser/models")]
import torch  # noqa: E402
import transformers  # noqa: E402

assert transformers.__version__.startswith("4."), transformers.__version__
from moe_models import MoEBertModel  # noqa: E402
from transformers import BertConfig  # noqa: E402

config = BertConfig(
    vocab_size=24,
    hidden_size=8,
    num_hidden_layers=6,
    num_attention_heads=2,
    intermediate_size=16,
    max_position_embeddings=16,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
config.moe_type, config.num_expert, config.use_infer_expert, config.per_layer_gating = (
    "mod3:fwd",
    2,
    False,
    False,
)
torch.manual_seed(2929)
model = MoEBertModel(config).eval()
with torch.no_grad():
    for name, p in model.named_parameters():  # random, with LayerNorm gains near 1 (signal survives 6 blocks)
        if "LayerNorm.weight" in name:
            p.copy_(1.0 + 0.2 * torch.randn_like(p))
        elif "embeddings" in name:
            p.copy_(torch.randn_like(p))
        else:
            p.copy_(0.3 * torch.randn_like(p))
weights, names = {}, {}
for name, value in model.state_dict().items():
    if name.startswith("pooler.") or name.endswith(("position_ids", "token_type_ids")):
        continue
    target = "encoder." + name
    if ".moe_layer.interm_layers." in name:
        target = "encoder." + name.replace("moe_layer.interm_layers.", "output.experts.").replace(
            ".dense.", ".dense_in."
        )
    elif ".moe_layer.output_layers." in name:
        target = "encoder." + name.replace("moe_layer.output_layers.", "output.experts.").replace(
            ".dense.", ".dense_out."
        )
    names[target] = name
    weights[target] = {
        "shape": list(value.shape),
        "float32_le": base64.b64encode(value.contiguous().numpy().astype("<f4").tobytes()).decode(),
    }
ids = torch.tensor([[2, 5, 9, 13, 7, 3, 0], [2, 17, 4, 3, 0, 0, 0], [2, 11, 12, 21, 22, 19, 3]])
mask = (ids != 0).long()
with torch.no_grad():
    q = model(input_ids=ids, attention_mask=mask, expert_id=torch.zeros(3, dtype=torch.int64))[0][:, 0]
    p = model(input_ids=ids, attention_mask=mask, expert_id=torch.ones(3, dtype=torch.int64))[0][:, 0]
json.dump(
    {
        "config": {
            k: getattr(config, k)
            for k in (
                "vocab_size",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "intermediate_size",
                "max_position_embeddings",
            )
        },
        "reference": "MoEBertModel, moe_type mod3:fwd, num_expert 2, use_infer_expert False; expert_id 0 "
        "(questions) and 1 (passages), as BiEncoder's Det-R with one question and one passage expert",
        "expert_layers": [i for i, layer in enumerate(model.encoder.layer) if hasattr(layer, "moe_layer")],
        "reference_names": names,
        "weights": weights,
        "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(),
        "question_vectors": q.tolist(),
        "passage_vectors": p.tolist(),
    },
    sys.stdout,
)
