"""Cached-gradient contrastive training (GradCache, Gao et al. 2021), at fixed activation memory.

The contrastive loss couples every question with every passage of the batch, so plain
back-propagation keeps the activations of the whole batch alive. GradCache splits the step:

1. encode every bucket of questions and passages without building a graph (no activations kept);
2. compute the loss on those embeddings and its gradient with respect to each embedding;
3. encode each bucket again, now with a graph, and back-propagate that bucket's slice of the
   embedding gradient into the weights; its activations are freed before the next bucket.

The weight gradients equal those of one big forward/backward (up to float rounding), while
peak activation memory is that of one bucket. The price is a second forward, about 1.3x the
compute of a plain step, so it pays where memory, not compute, limits the batch size. Dropout
(and any other randomness) must draw the same numbers in both encodings, so each bucket's
random-generator state is recorded before step 1 and restored before step 3, as GradCache's
`RandContext` and sentence-transformers' CachedMultipleNegativesRankingLoss do.

Limits: the model must have no auxiliary loss over the whole batch (TASER's learned routing
entropy, DESIRE-ME's gating BCE), and it runs in one process (DDP's gradient hooks only fire on
a forward through the DDP wrapper).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .base import Retriever
from .buckets import Buckets
from .config import BI_ENCODER_ARCHS
from .data import Batch

Encode = Callable[[dict[str, torch.Tensor]], torch.Tensor]


def supports_grad_cache(retriever: Retriever) -> bool:
    """True for models whose loss is the contrastive loss alone: the bi-encoders and TASER with
    deterministic routing (learned routing adds a batch-wide entropy term)."""
    if retriever.arch in BI_ENCODER_ARCHS:
        return True
    taser = retriever.config.taser
    return taser is not None and (taser.routing == "det" or taser.num_experts == 1)


class RandomState:
    """The CPU (and current CUDA device's) generator state, to replay the same random draws."""

    def __init__(self, device: torch.device) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
        self.device = device

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)


def _autocast(device: torch.device, amp: torch.dtype | None):
    return torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None)


def _encode_without_graph(
    encode: Encode, buckets: Buckets, device: torch.device, amp: torch.dtype | None
) -> tuple[torch.Tensor, list[RandomState]]:
    """Step 1: embeddings of every bucket (batch order) and the RNG state before each bucket."""
    states, vectors = [], []
    with torch.no_grad():
        for chunk in buckets.chunks:
            states.append(RandomState(device))
            with _autocast(device, amp):
                vectors.append(encode(chunk).float())
    stacked = torch.cat(vectors)
    restored = torch.empty_like(stacked)
    restored[buckets.rows] = stacked
    return restored, states


def _backward_by_bucket(
    encode: Encode,
    buckets: Buckets,
    gradient: torch.Tensor,
    states: list[RandomState],
    device: torch.device,
    amp: torch.dtype | None,
) -> None:
    """Step 3: re-encode each bucket with a graph, replaying its random draws, and push its rows'
    embedding gradient into the weights."""
    for chunk, rows, state in zip(buckets.chunks, buckets.chunk_rows(), states, strict=True):
        state.restore()
        with _autocast(device, amp):
            vectors = encode(chunk).float()
        vectors.backward(gradient[rows])


def cached_forward_backward(
    model: Retriever,
    batch: Batch,
    device: torch.device,
    loss_function: Callable[..., torch.Tensor],
    temperature: float,
    amp: torch.dtype | None,
    scaler: torch.amp.GradScaler,
    accumulation_steps: int = 1,
    exclude: torch.Tensor | None = None,
) -> tuple[float, dict[str, float]]:
    """One micro-batch of GradCache: same loss and (up to rounding) same gradients as
    `trainer.forward_backward`, with the activations of one bucket alive at a time. `exclude`:
    the (question, passage) pairs that are not negatives (`losses.duplicate_positive_mask`)."""
    if not isinstance(batch.question_inputs, Buckets) or not isinstance(batch.passage_inputs, Buckets):
        raise ValueError("cached-gradient training needs both sides of the batch in length buckets")
    questions, question_states = _encode_without_graph(
        model.embed_questions, batch.question_inputs, device, amp
    )
    passages, passage_states = _encode_without_graph(model.embed_passages, batch.passage_inputs, device, amp)
    after_first_pass = RandomState(device)
    questions.requires_grad_(True)
    passages.requires_grad_(True)
    loss = loss_function(questions, passages, batch.positive_index, temperature, exclude)
    scaler.scale(loss / accumulation_steps).backward()
    _backward_by_bucket(
        model.embed_questions, batch.question_inputs, questions.grad, question_states, device, amp
    )
    _backward_by_bucket(
        model.embed_passages, batch.passage_inputs, passages.grad, passage_states, device, amp
    )
    # Later draws continue from where the first pass left the generator, as in a plain step.
    after_first_pass.restore()
    return float(loss.detach()), {}
