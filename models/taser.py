"""TASER: one encoder whose specialized blocks hold expert FFNs (TASER paper, section 3.1).

Starting from a pretrained BERT-like encoder, every (T+1)-th Transformer block from the bottom
(T=2: shared, shared, specialized, ...) gets I expert FFN sub-layers, each a copy of the
pretrained FFN (dense-in, activation, dense-out, dropout, residual LayerNorm, as in the
official implementation). Everything else is shared between questions and passages.

The HF layer is patched rather than re-implemented: `layer.intermediate` becomes an identity
and `layer.output` becomes a `SpecializedFFN` that receives the attention output, so the HF
layer's own forward keeps working across transformers versions and model families whose
layers follow the BERT `intermediate` + `output(hidden, input)` pattern.

Routing:
- `det`: questions use expert 0, passages expert 1 (Det-R).
- `seq`: a linear router on the [CLS] FFN input picks one expert per sequence (Seq-R).
- `tok`: the same router applied to each token (Tok-R).
Learned routers sample a hard one-hot choice with Gumbel-softmax and a straight-through
gradient while training and take the argmax at inference. The router's probabilities are
collected so the trainer can add the entropy regulariser (eq. 5-6; see `losses.routing_entropy`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from .backbone import pool
from .base import Inputs, Retriever, RetrieverOutput
from .buckets import Buckets, embed_rows
from .config import TASER_ARCHS, RetrieverConfig, TaserConfig
from .losses import routing_entropy


def specialized_layer_indices(num_layers: int, shared_blocks: int) -> list[int]:
    """0-based indices of the specialized blocks: every (T+1)-th block counted from the bottom."""
    period = shared_blocks + 1
    return [i for i in range(num_layers) if (i + 1) % period == 0]


@dataclass
class RoutingContext:
    """State shared by all specialized blocks during one encoder call.

    `side` tells Det-R which expert to use; `mask` marks real tokens so Tok-R statistics skip
    padding; `probabilities` collects each learned router's softmax output for the entropy term.
    """

    side: str = "question"
    mask: torch.Tensor | None = None
    probabilities: list[torch.Tensor] = field(default_factory=list)


class ExpertFFN(nn.Module):
    """One FFN sub-layer with its residual LayerNorm: LN(gate * W2 act(W1 h + b1) + b2 + h)."""

    def __init__(self, intermediate: nn.Module, output: nn.Module) -> None:
        super().__init__()
        self.dense_in = copy.deepcopy(intermediate.dense)
        self.activation = copy.deepcopy(intermediate.intermediate_act_fn)
        self.dense_out = copy.deepcopy(output.dense)
        self.dropout = copy.deepcopy(output.dropout)
        self.LayerNorm = copy.deepcopy(output.LayerNorm)

    def forward(self, hidden: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        update = self.dropout(self.dense_out(self.activation(self.dense_in(hidden))))
        if gate is not None:
            update = update * gate
        return self.LayerNorm(update + hidden)


class SpecializedFFN(nn.Module):
    """Replaces a layer's `output` module: routes the attention output through one expert."""

    def __init__(
        self, intermediate: nn.Module, output: nn.Module, taser: TaserConfig, context: RoutingContext
    ) -> None:
        super().__init__()
        self.experts = nn.ModuleList(ExpertFFN(intermediate, output) for _ in range(taser.num_experts))
        self.routing = taser.routing
        self.tau = taser.gumbel_tau
        self.router: nn.Linear | None = None
        if taser.num_experts > 1 and taser.routing in ("seq", "tok"):
            self.router = nn.Linear(self.experts[0].dense_in.in_features, taser.num_experts)
            nn.init.normal_(self.router.weight, std=0.02)
            nn.init.zeros_(self.router.bias)
        self._context = [context]  # a list keeps the context out of the module tree

    @property
    def context(self) -> RoutingContext:
        return self._context[0]

    def forward(self, intermediate_output: torch.Tensor, attention_output: torch.Tensor) -> torch.Tensor:
        hidden = attention_output  # `intermediate` is an identity, so both arguments are equal
        if len(self.experts) == 1:
            return self.experts[0](hidden)
        if self.router is None:  # Det-R
            return self.experts[0 if self.context.side == "question" else 1](hidden)
        if self.routing == "seq":
            logits = self.router(hidden[:, 0])
            choice, gate = self._choose(logits)
            self._record(logits, None)
            return self._dispatch(hidden, choice, gate.unsqueeze(-1).unsqueeze(-1))
        batch, length, width = hidden.shape
        flat = hidden.reshape(batch * length, 1, width)
        logits = self.router(flat[:, 0])
        choice, gate = self._choose(logits)
        mask = self.context.mask
        self._record(logits, None if mask is None else mask.reshape(-1).bool())
        return self._dispatch(flat, choice, gate.unsqueeze(-1).unsqueeze(-1)).reshape(batch, length, width)

    def _choose(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert index per row and the straight-through gate value (1 forward, soft backward)."""
        if self.training:
            one_hot = nn.functional.gumbel_softmax(logits.float(), tau=self.tau, hard=True)
        else:
            one_hot = nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
        choice = one_hot.argmax(dim=-1)
        gate = one_hot.gather(-1, choice.unsqueeze(-1)).squeeze(-1)
        return choice, gate.to(logits.dtype)

    def _record(self, logits: torch.Tensor, keep: torch.Tensor | None) -> None:
        if not self.training:  # the entropy term is a training loss; inference keeps nothing
            return
        probabilities = logits.float().softmax(dim=-1)
        if keep is not None:
            probabilities = probabilities[keep]
        self.context.probabilities.append(probabilities)

    def _dispatch(self, rows: torch.Tensor, choice: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """Run each expert only on the rows routed to it (sparse activation); the rows are
        written in place into one output buffer rather than copying it once per expert."""
        out = torch.empty_like(rows)
        for index, expert in enumerate(self.experts):
            selected = (choice == index).nonzero(as_tuple=True)[0]
            if selected.numel() == 0:
                continue
            out.index_copy_(0, selected, expert(rows[selected], gate[selected]).to(out.dtype))
        return out


def specialize_encoder(encoder: nn.Module, taser: TaserConfig, context: RoutingContext) -> list[int]:
    """Turn the layout's blocks of `encoder` into specialized blocks, in place."""
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    if layers is None:
        raise ValueError(f"{type(encoder).__name__} has no encoder.layer stack to specialize")
    indices = taser.specialized_layers or specialized_layer_indices(len(layers), taser.shared_blocks)
    for index in indices:
        layer = layers[index]
        if not (hasattr(layer, "intermediate") and hasattr(layer.output, "LayerNorm")):
            raise ValueError(
                f"layer {index} of {type(encoder).__name__} lacks the BERT intermediate/output FFN "
                "that TASER specializes"
            )
        layer.output = SpecializedFFN(layer.intermediate, layer.output, taser, context)
        layer.intermediate = nn.Identity()
    return indices


class TaserRetriever(Retriever):
    """One shared encoder with interleaved specialized blocks (TASER)."""

    def __init__(
        self, config: RetrieverConfig, tokenizer: PreTrainedTokenizerBase, encoder: nn.Module
    ) -> None:
        if config.arch not in TASER_ARCHS or config.taser is None:
            raise ValueError(f"TaserRetriever cannot build arch {config.arch!r}")
        super().__init__(config, tokenizer)
        self.context = RoutingContext()
        config.taser.specialized_layers = specialize_encoder(encoder, config.taser, self.context)
        self.encoder = encoder

    @property
    def embedding_dim(self) -> int:
        return self.encoder.config.hidden_size

    def _embed(self, inputs: Inputs, side: str) -> torch.Tensor:
        self.context.side = side
        self.context.mask = inputs["attention_mask"]
        hidden = self.encoder(**inputs).last_hidden_state
        self.context.mask = None
        return self.finish_embedding(pool(hidden, inputs["attention_mask"], self.config.pooling))

    def embed_questions(self, inputs: Inputs) -> torch.Tensor:
        return self._embed(inputs, "question")

    def embed_passages(self, inputs: Inputs) -> torch.Tensor:
        return self._embed(inputs, "passage")

    def forward(
        self,
        question_inputs: Inputs | Buckets,
        passage_inputs: Inputs | Buckets,
        domain_targets: torch.Tensor | None = None,
    ) -> RetrieverOutput:
        # Each encoder call (a bucket, too) records its blocks' routing in layer order, which is
        # what `routing_entropy` expects; the entropy is of the mean over every routed row.
        self.context.probabilities = []
        questions = embed_rows(self.embed_questions, question_inputs)
        passages = embed_rows(self.embed_passages, passage_inputs)
        probabilities, self.context.probabilities = self.context.probabilities, []
        if not probabilities:
            return RetrieverOutput(questions, passages)
        entropy = routing_entropy(probabilities, len(self.config.taser.specialized_layers))
        # The regulariser rewards a high entropy of the mean routing distribution (balanced use).
        aux = -self.config.taser.entropy_beta * entropy
        return RetrieverOutput(questions, passages, aux, {"routing_entropy": float(entropy.detach())})
