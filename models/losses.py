"""Training objectives.

- `contrastive_loss`: TASER eq. 3 / DPR eq. 2.8, the negative log-likelihood of each question's
  positive passage among every passage of the batch: the other questions' positives (in-batch
  negatives) and all hard negatives. Scores are inner products divided by a temperature.
- `stop_gradient_loss`: thesis eq. 5.1, ½·NLL(sg(q), p) + ½·NLL(q, sg(p)). Each side gets the
  gradient of the contrastive loss with the other side held fixed, at half weight.
- `flipped_contrastive_loss`: thesis 5.1 "flip": for each positive passage, the NLL of its own
  question among the batch's questions (a passage-side discriminator).
- `exclude` (every objective): score entries that must not count as negatives, e.g. another
  copy of a question's own positive passage in the batch (`duplicate_positive_mask`). Two
  questions about the same paragraph, or a hard negative that is another question's positive,
  would otherwise teach the model to push a question away from its own answer passage.
- `routing_entropy`: TASER eq. 5 on the mean routing distribution of each specialized block.
  The paper adds the regulariser "to avoid routing all inputs to the same expert"; that is the
  effect of *raising* the entropy of the mean distribution, so `TaserRetriever` adds
  `-beta * routing_entropy` (the official code likewise adds `sum p log p`).
- `domain_bce`: DESIRE-ME's multi-label gating loss (sigmoid per domain, binary cross-entropy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.nn import functional

from .settings import OBJECTIVES


def _targets(questions: torch.Tensor, positive_index: torch.Tensor | None) -> torch.Tensor:
    if positive_index is None:
        return torch.arange(questions.shape[0], device=questions.device)
    return positive_index


def _nll(
    questions: torch.Tensor,
    passages: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    scores = (questions @ passages.transpose(0, 1)).float() / temperature
    if exclude is not None:
        scores = scores.masked_fill(exclude, float("-inf"))
    return functional.cross_entropy(scores, targets)


def duplicate_positive_mask(passage_keys: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(questions, passages) True where passage j is another copy of question i's positive:
    the same key as its target, at another column."""
    same = passage_keys.unsqueeze(0) == passage_keys[targets].unsqueeze(1)
    same[torch.arange(targets.shape[0], device=targets.device), targets] = False
    return same


def contrastive_loss(
    questions: torch.Tensor,
    passages: torch.Tensor,
    positive_index: torch.Tensor | None = None,
    temperature: float = 1.0,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    """NLL of passage `positive_index[i]` for question i among all `passages` (default: i)."""
    return _nll(questions, passages, _targets(questions, positive_index), temperature, exclude)


def stop_gradient_loss(
    questions: torch.Tensor,
    passages: torch.Tensor,
    positive_index: torch.Tensor | None = None,
    temperature: float = 1.0,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    targets = _targets(questions, positive_index)
    return 0.5 * _nll(questions.detach(), passages, targets, temperature, exclude) + 0.5 * _nll(
        questions, passages.detach(), targets, temperature, exclude
    )


def flipped_contrastive_loss(
    questions: torch.Tensor,
    passages: torch.Tensor,
    positive_index: torch.Tensor | None = None,
    temperature: float = 1.0,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    """Each positive passage must pick its own question among the batch's questions; with
    `exclude`, questions whose positive is the same passage are not its negatives."""
    targets = _targets(questions, positive_index)
    positives = passages[targets]
    own = torch.arange(questions.shape[0], device=questions.device)
    shared = exclude[:, targets] if exclude is not None else None  # question i's positive is question j's
    return _nll(positives, questions, own, temperature, shared)


def objective(name: str) -> Callable[..., torch.Tensor]:
    functions = {
        "contrastive": contrastive_loss,
        "stopgrad": stop_gradient_loss,
        "flipped": flipped_contrastive_loss,
    }
    if name not in functions:
        raise ValueError(f"unknown objective {name!r}; expected one of {OBJECTIVES}")
    return functions[name]


def routing_entropy(probabilities: Sequence[torch.Tensor], num_layers: int) -> torch.Tensor:
    """Mean over specialized blocks of H(mean routing distribution) = -sum_i P(i) log P(i).

    `probabilities` holds one (rows, experts) tensor per block per encoder call, appended in
    layer order for each call (questions, then passages), so block k owns entries k, k+L, ...
    """
    if num_layers < 1 or len(probabilities) % num_layers:
        raise ValueError(f"{len(probabilities)} routing records do not divide into {num_layers} blocks")
    entropies = []
    for layer in range(num_layers):
        rows = torch.cat(list(probabilities[layer::num_layers]), dim=0)
        mean = rows.mean(dim=0)
        entropies.append(-(mean * torch.log(mean.clamp(min=1e-12))).sum())
    return torch.stack(entropies).mean()


def domain_bce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return functional.binary_cross_entropy_with_logits(logits.float(), targets.float())
