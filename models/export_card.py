"""The README.md of an exported model folder: how to call it so that the vectors are odqa's.

It names models without local paths (`storage.model_registry.public_model_name`): the card
travels with the folder, to other machines and to the Hugging Face hub.
"""

from __future__ import annotations

import textwrap

from ..storage.model_registry import public_model_name
from .base import Retriever
from .export_backbone import CompleteEncoder


def _passage_advice(passage_input: str, max_length: int) -> str:
    if passage_input == "joined-lowercase":
        return (f"pass each passage as **one lowercased string** `f\"{{title}} {{text}}\".lower()`, as this "
                f"model was trained (DESIRE-ME's reference input), truncated to {max_length} tokens.")
    return ("pass each passage as a **(title, text) pair**. odqa tokenizes a passage as the\n  tokenizer pair "
            "`[CLS] title [SEP] text [SEP]` (second segment type ids for the text), truncated\n  longest-first to "
            f"{max_length} tokens. A joined string such as `\"title text\"` gives different vectors.")


def _added_weights(encoder: CompleteEncoder, base_label: str) -> str:
    """What the card says of the weights odqa's model lacked (`models.export_backbone`)."""
    if encoder.source is None:
        return ""
    names = ", ".join(f"`{name}`" for name in encoder.added)
    origin = (f"taken from the base `{base_label}`" if encoder.source == "base"
              else "initialised as the architecture initialises them, under a fixed seed (the base has none)")  # fmt: skip
    return "\n" + textwrap.fill(
        f"Each encoder holds every weight its architecture loads, so loading it reports nothing missing. "
        f"odqa never trains or uses {names} (its vectors pool the token states): they are {origin}.",
        width=100,
    ) + "\n"


def model_card(retriever: Retriever, model_name: str, layout: str, hf_folders: dict[str, str],
               encoder: CompleteEncoder) -> str:  # fmt: skip
    """The card of an export of `retriever` (given as `model_name`) with `layout` and `hf_folders`;
    `encoder` is one of its complete encoders (all were completed alike)."""
    config = retriever.config
    base = public_model_name(config.base)
    base_text = f"base `{base.label}`" if base.hub_name else f"base: a local folder named `{base.label}`"
    plain = "\n".join(f"- {route}: `AutoModel.from_pretrained(\"<folder>/{folder}\")`"
                      for route, folder in sorted(hf_folders.items()))  # fmt: skip
    norm = "L2-normalised (cosine)" if config.similarity == "cosine" else "not normalised (dot product)"
    routes = ("one encoder for questions and passages" if layout == "single"
              else "a `Router`: the `query` route encodes questions, the `document` route passages.\n  "
                   "It has no default route: plain `encode(texts)` raises (`Could not determine route for\n  "
                   "task=None`) rather than pick a tower. Call `encode_query` or `encode_document` (or pass\n  "
                   "`task=\"query\"` / `task=\"document\"`)")  # fmt: skip
    base_model = f"base_model: {base.hub_name}\n" if base.hub_name else ""
    name = public_model_name(model_name).label
    return f"""---
library_name: sentence-transformers
tags: [sentence-transformers, feature-extraction, dense-retrieval, odqa]
{base_model}---
# {name}

Exported by odqa from model `{name}` (arch `{config.arch}`, {base_text},
fingerprint `{retriever.config_fingerprint()[:16]}`). It loads without odqa:

```python
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("<folder>")
q = model.encode_query(["who wrote hamlet?"])
p = model.encode_document([("Hamlet", "Hamlet is a tragedy by William Shakespeare.")])
scores = model.similarity(q, p)
```

## Giving odqa's vectors

- Layout: {routes}.
- Passages: {_passage_advice(config.passage_input, config.passage_max_length)}
- Questions: `encode_query(text)`, truncated to {config.question_max_length} tokens.
- Pooling: `{config.pooling}`{"; a shared linear projection to " + str(config.projection_dim) if config.projection_dim else ""};
  vectors are {norm}; similarity `{config.similarity}`.

## Plain Hugging Face encoders

{plain}
{_added_weights(encoder, base.label)}"""
