"""A trained retriever as a sentence-transformers folder that loads without odqa.

`SentenceTransformer(folder)` then gives odqa's own vectors: `encode_query(texts)` equals
`encode_questions`, and `encode_document([(title, text), ...])` equals `encode_passages` (odqa
tokenizes a passage as the pair `title [SEP] text`, so the pair, not one joined string, gives the
same tokens). Pooling, an `ade-spl` projection and cosine normalisation become the standard
`Pooling`, `Dense` and `Normalize` modules.

- One encoder (`sde`, `taser-shared`): one `Transformer`; the folder is also a plain Hugging Face
  model (`AutoModel.from_pretrained(folder)`).
- Two towers (`dpr`, `ade*`) and TASER Det-R: a `Router` with a `query` and a `document` route.
  Det-R's towers are the shared encoder with the question expert (query) or the passage expert
  (document) in each specialized block: an expert FFN has exactly BERT's FFN modules, so each
  route is a plain BERT and the shared weights are stored once per route. The `Router` has no
  default route, so a plain `encode` raises instead of silently using one tower.
- Each encoder is stored as its architecture's full default model (BERT with its pooler:
  models/export_backbone.py), so that neither sentence-transformers nor `AutoModel` warns of
  newly initialised weights when loading it.
- Refused: TASER Seq-R/Tok-R (the expert depends on the input, which no plain encoder expresses)
  and DESIRE-ME (its query vector mixes domain specialisers by a learned gate, which has no
  sentence-transformers module; loading it would need odqa's code).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ..storage.atomic import atomic_write_text
from .backbone import build_encoder, quiet_transformers
from .base import Retriever
from .config import DESIRE_ME_ARCHS, TASER_ARCHS
from .encoders import BiEncoder
from .export_backbone import complete_encoder
from .export_card import model_card
from .taser import TaserRetriever

# The expert's modules and the BERT FFN modules they were copied from (models/taser.py).
_EXPERT_TO_BERT = {"dense_in": "intermediate.dense", "dense_out": "output.dense", "LayerNorm": "output.LayerNorm"}


class ExportRefused(ValueError):
    """The model has no exact sentence-transformers form; the message says why."""


@dataclass(frozen=True)
class ExportedModel:
    """What was written: the folder's layout and where plain Hugging Face encoders lie in it."""

    layout: str  # "single" | "router"
    hf_folders: dict[str, str]  # route ("query", "document" or "both") -> folder relative to the export
    added_weights: list[str]  # weights odqa's model lacks that the export adds (models/export_backbone.py)
    added_from: str | None  # "base" or "initialised"; None when none were added


def side_encoders(retriever: Retriever) -> dict[str, nn.Module]:
    """Plain Hugging Face encoders per route: {"both": enc} or {"query": q, "document": d}."""
    arch = retriever.config.arch
    if arch in DESIRE_ME_ARCHS:
        raise ExportRefused(
            f"{arch}: the query vector mixes domain specialisers weighted by a learned gate "
            "(models/desire_me.py); sentence-transformers has no module for that, so an exact export "
            "would need odqa's code. Export the base retriever it wraps instead (its passage side is "
            "this model's passage side)."
        )
    if isinstance(retriever, BiEncoder):
        if arch == "sde":
            return {"both": retriever.question_tower.encoder}
        return {"query": retriever.question_tower.encoder, "document": retriever.passage_tower.encoder}
    if isinstance(retriever, TaserRetriever) and arch in TASER_ARCHS:
        taser = retriever.config.taser
        if taser.num_experts == 1:
            return {"both": _taser_expert_encoder(retriever, 0)}
        if taser.routing != "det":
            raise ExportRefused(
                f"{arch} with {taser.routing} routing: a learned router picks the expert per "
                "sequence or token, which no plain encoder expresses; only Det-R exports exactly"
            )
        return {"query": _taser_expert_encoder(retriever, 0), "document": _taser_expert_encoder(retriever, 1)}
    raise ExportRefused(f"{arch}: no sentence-transformers export for {type(retriever).__name__}")


def _taser_expert_encoder(retriever: TaserRetriever, expert: int) -> nn.Module:
    """A plain encoder equal to the TASER encoder with `expert` in every specialized block."""
    plain = build_encoder(retriever.config.backbone)
    state: dict[str, Any] = {}
    marker = ".output.experts."
    for name, tensor in retriever.encoder.state_dict().items():
        if marker not in name:
            state[name] = tensor
            continue
        layer, rest = name.split(marker, 1)
        index, module, parameter = rest.split(".", 2)
        if int(index) == expert:
            state[f"{layer}.{_EXPERT_TO_BERT[module]}.{parameter}"] = tensor
    plain.load_state_dict(state, strict=True)
    return plain.eval()


def export_sentence_transformers(retriever: Retriever, folder: Path, model_name: str) -> ExportedModel:
    """Write `retriever` into the empty `folder` as a sentence-transformers model (the caller
    builds `folder` beside the target and swaps it in: `storage.write_targets.export_folder`)."""
    try:
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import (
            Dense,
            Normalize,
            Pooling,
            Router,
            Transformer,
        )
    except ImportError as error:
        raise ImportError(
            "exporting to sentence-transformers needs the sentence-transformers package "
            "(pip install 'odqa[export]')"
        ) from error
    config = retriever.config
    encoders = {route: complete_encoder(encoder, config.base) for route, encoder in side_encoders(retriever).items()}
    with tempfile.TemporaryDirectory(prefix="odqa-export-") as scratch, quiet_transformers():
        transformers: dict[str, Transformer] = {}
        for route, encoder in encoders.items():
            saved = Path(scratch) / route
            encoder.model.save_pretrained(saved, safe_serialization=True)
            retriever.tokenizer.save_pretrained(saved)
            lengths = {"query": config.question_max_length, "document": config.passage_max_length}
            transformers[route] = Transformer(
                str(saved),
                max_seq_length=lengths.get(route, max(lengths.values())),
                query_length=config.question_max_length if route in ("both", "query") else None,
                document_length=config.passage_max_length if route in ("both", "document") else None,
            )
        pooling = Pooling(next(iter(encoders.values())).model.config.hidden_size, config.pooling)
        head: list[nn.Module] = [pooling]
        projection = getattr(retriever, "projection", None)
        if projection is not None:
            head.append(Dense(projection.in_features, projection.out_features, activation_function=None,
                              init_weight=projection.weight.detach().clone(),
                              init_bias=projection.bias.detach().clone()))  # fmt: skip
        if "both" in transformers:
            modules = [transformers["both"], *head]
            layout = "single"
        else:
            # No default route: a plain `encode` raises, naming the routes, instead of silently
            # encoding with one tower (sentence-transformers' own default is the document side).
            modules = [Router.for_query_document(query_modules=[transformers["query"], *head],
                                                 document_modules=[transformers["document"], *head],
                                                 default_route=None, allow_empty_key=False)]  # fmt: skip
            layout = "router"
        if config.similarity == "cosine":
            modules.append(Normalize())
        model = SentenceTransformer(modules=modules, similarity_fn_name=config.similarity, device="cpu")
        model.save(str(folder))
    hf_folders = _hf_folders(folder)
    completed = next(iter(encoders.values()))
    atomic_write_text(folder / "README.md", model_card(retriever, model_name, layout, hf_folders, completed))
    return ExportedModel(layout=layout, hf_folders=hf_folders, added_weights=list(completed.added),
                         added_from=completed.source)  # fmt: skip


def _hf_folders(root: Path) -> dict[str, str]:
    """Where the saved folder holds plain Hugging Face models (a config.json with model_type)."""
    found: dict[str, str] = {}
    for config in sorted(root.rglob("config.json")):
        data = json.loads(config.read_text(encoding="utf-8"))
        if "model_type" not in data:
            continue
        relative = config.parent.relative_to(root).as_posix()
        route = "both" if relative == "." else ("query" if "query" in relative else "document")
        found[route] = "" if relative == "." else relative
    return found
