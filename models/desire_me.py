"""DESIRE-ME: a query-side mixture of domain specializers over any base retriever (section 3.2, 4.1).

- Gating: a multi-label domain classifier h -> 2h -> 4h -> D (ReLU), a sigmoid per domain,
  trained with binary cross-entropy on the question's domain labels.
- Specializers: one per domain, h -> h/2 (ReLU) -> h.
- Pooling with skip connection: q' = normalize(sum_i w_i * specializer_i(q)) + q. The gate
  weights are detached (the classifier learns from BCE only, the specializers from the
  contrastive loss, as in the official code); all-zero gates give a zero sum, whose
  normalisation stays zero, so an out-of-domain query keeps its base vector q.
- Passages are embedded by the base retriever unchanged, so one passage index serves both the
  base model and DESIRE-ME. The base is frozen by default.
- RND-G (`gate="random"`): uniform random weights replace the classifier's output. They are
  drawn per question from a generator seeded by the question's tokens, so encoding the same
  question twice gives the same vector.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn
from torch.nn import functional

from .base import Inputs, Retriever, RetrieverOutput, freeze
from .buckets import Buckets, embed_rows
from .config import DESIRE_ME_ARCHS, RetrieverConfig
from .losses import domain_bce


class DomainGate(nn.Module):
    """Multi-label domain classifier: logits for each domain."""

    def __init__(self, hidden: int, domains: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(hidden, 2 * hidden),
            nn.ReLU(),
            nn.Linear(2 * hidden, 4 * hidden),
            nn.ReLU(),
            nn.Linear(4 * hidden, domains),
        )

    def forward(self, query: torch.Tensor) -> torch.Tensor:
        return self.layers(query)


class Specializer(nn.Module):
    """Adapter-style down/up projection that contextualises a query for one domain."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.down = nn.Linear(hidden, hidden // 2)
        self.up = nn.Linear(hidden // 2, hidden)

    def forward(self, query: torch.Tensor) -> torch.Tensor:
        return self.up(functional.relu(self.down(query)))


def mix_specializers(query: torch.Tensor, specialized: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """normalize(sum_i w_i * s_i) + q; `specialized` is (batch, domains, hidden)."""
    pooled = torch.einsum("bdh,bd->bh", specialized, weights)
    return functional.normalize(pooled, dim=-1, eps=1e-6) + query


class DesireMeRetriever(Retriever):
    """A base retriever whose question vectors pass through the DESIRE-ME mixture."""

    def __init__(self, config: RetrieverConfig, base: Retriever) -> None:
        if config.arch not in DESIRE_ME_ARCHS or config.desire_me is None:
            raise ValueError(f"DesireMeRetriever cannot build arch {config.arch!r}")
        if isinstance(base, DesireMeRetriever):
            raise ValueError("DESIRE-ME cannot wrap another DESIRE-ME model")
        super().__init__(config, base.tokenizer)
        self.base = base
        hidden = base.embedding_dim
        domains = len(config.desire_me.domains)
        self.gate = DomainGate(hidden, domains)
        self.specializers = nn.ModuleList(Specializer(hidden) for _ in range(domains))
        if config.desire_me.freeze_base:
            freeze(self.base)

    @property
    def domains(self) -> list[str]:
        return list(self.config.desire_me.domains)

    @property
    def embedding_dim(self) -> int:
        return self.base.embedding_dim

    def train(self, mode: bool = True) -> DesireMeRetriever:
        super().train(mode)
        if self.config.desire_me.freeze_base:
            self.base.eval()  # a frozen base also keeps its dropout off
        return self

    def _base_questions(self, inputs: Inputs) -> torch.Tensor:
        if self.config.desire_me.freeze_base:
            with torch.no_grad():
                return self.base.embed_questions(inputs)
        return self.base.embed_questions(inputs)

    def _weights(self, logits: torch.Tensor, inputs: Inputs) -> torch.Tensor:
        if self.config.desire_me.gate == "learned":
            return torch.sigmoid(logits.detach())
        return self._random_weights(inputs, logits.shape[-1]).to(logits)

    def _random_weights(self, inputs: Inputs, domains: int) -> torch.Tensor:
        ids = inputs["input_ids"].detach().cpu()
        mask = inputs["attention_mask"].detach().cpu().bool()
        rows = []
        for row, keep in zip(ids, mask, strict=True):
            key = hashlib.sha256(row[keep].numpy().tobytes()).digest()
            seed = int.from_bytes(key[:8], "little") ^ self.config.desire_me.seed
            generator = torch.Generator().manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)
            rows.append(torch.rand(domains, generator=generator))
        return torch.stack(rows)

    def specialize(self, query: torch.Tensor, inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """The DESIRE-ME query vector and the gate logits, from a base query vector."""
        logits = self.gate(query)
        specialized = torch.stack([s(query) for s in self.specializers], dim=1)
        mixed = mix_specializers(query, specialized, self._weights(logits, inputs))
        return self.finish_embedding(mixed), logits

    def embed_questions(self, inputs: Inputs) -> torch.Tensor:
        return self.specialize(self._base_questions(inputs), inputs)[0]

    def embed_passages(self, inputs: Inputs) -> torch.Tensor:
        if self.config.desire_me.freeze_base:
            with torch.no_grad():
                return self.base.embed_passages(inputs)
        return self.base.embed_passages(inputs)

    def forward(
        self, question_inputs: Inputs, passage_inputs: Inputs | Buckets, domain_targets: torch.Tensor | None = None
    ) -> RetrieverOutput:
        """Questions come as one padded block (the random gate hashes each row's tokens);
        passages may come in length buckets."""
        questions, logits = self.specialize(self._base_questions(question_inputs), question_inputs)
        passages = embed_rows(self.embed_passages, passage_inputs)
        if domain_targets is None:
            raise ValueError("DESIRE-ME training needs domain targets for the gating BCE")
        bce = domain_bce(logits, domain_targets)
        return RetrieverOutput(questions, passages, bce, {"domain_bce": float(bce.detach())})
