"""Length bucketing inside a micro-batch: rows sorted by token length and encoded in buckets,
each padded only to its own longest row.

Why: padding a whole micro-batch to its longest passage wastes much of a CPU training step.
SQuAD paragraphs, for example, run from ~100 to 256+ word pieces (median ~150), so a batch of 32
padded to 256 is ~40% padding, and attention costs grow with the square of the padded length.
Bucketing *inside* the micro-batch keeps the batch exactly as sampled (the same in-batch and
hard negatives for every question), so the loss is the same function of the same examples;
only padding work (and the activation memory it holds) goes away. The buckets are also the
chunks that cached-gradient training (`models.grad_cache`) re-encodes one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

Inputs = dict[str, torch.Tensor]


@dataclass
class Buckets:
    """Rows of one side of a batch, split into length-sorted, separately padded buckets.

    `rows[i]` is the batch row held by row i of the buckets concatenated in order, so
    `embed` can put the vectors back into batch order.
    """

    chunks: list[Inputs]
    rows: torch.Tensor

    def __len__(self) -> int:
        return int(self.rows.numel())

    def to(self, device: torch.device) -> Buckets:
        return Buckets([{k: v.to(device) for k, v in c.items()} for c in self.chunks], self.rows.to(device))

    def chunk_rows(self) -> list[torch.Tensor]:
        """The batch rows of each bucket, in bucket order."""
        sizes = [int(c["input_ids"].shape[0]) for c in self.chunks]
        return list(torch.split(self.rows, sizes))

    def padded_tokens(self) -> int:
        return sum(int(c["input_ids"].numel()) for c in self.chunks)

    def embed(self, encode: Callable[[Inputs], torch.Tensor]) -> torch.Tensor:
        """`encode` applied bucket by bucket, the vectors returned in batch order."""
        vectors = torch.cat([encode(chunk) for chunk in self.chunks])
        restored = torch.empty_like(vectors)
        restored[self.rows] = vectors
        return restored


def embed_rows(encode: Callable[[Inputs], torch.Tensor], inputs: Inputs | Buckets) -> torch.Tensor:
    """`encode(inputs)` for one padded block, or bucket by bucket for `Buckets`."""
    if isinstance(inputs, Buckets):
        return inputs.embed(encode)
    return encode(inputs)


def bucket_sizes(lengths: Sequence[int], max_tokens: int) -> list[int]:
    """Rows per bucket for rows sorted longest first: each bucket holds as many rows as fit in
    `max_tokens` padded tokens (its first row sets the padded length), and at least one."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    sizes: list[int] = []
    start = 0
    while start < len(lengths):
        width = max(1, lengths[start])
        count = max(1, min(len(lengths) - start, max_tokens // width))
        sizes.append(count)
        start += count
    return sizes


def bucketed(
    encodings: dict[str, list[list[int]]], tokenizer: PreTrainedTokenizerBase, max_tokens: int
) -> Buckets:
    """Unpadded tokenizer output (lists of ids per row) as `Buckets` of at most `max_tokens`
    padded tokens each; ties in length keep the batch order, so bucketing is deterministic."""
    lengths = [len(ids) for ids in encodings["input_ids"]]
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    chunks: list[Inputs] = []
    start = 0
    for size in bucket_sizes([lengths[i] for i in order], max_tokens):
        rows = order[start : start + size]
        start += size
        chunk = {key: [values[i] for i in rows] for key, values in encodings.items()}
        chunks.append(dict(tokenizer.pad(chunk, padding=True, return_tensors="pt")))
    return Buckets(chunks, torch.tensor(order, dtype=torch.long))
