"""The training passages' token ids, read from the workspace's `passage_tokens` table.

Every round of training, every mining round's retraining and every model of an architecture
comparison tokenizes the same positives and hard negatives again at every step. With a workspace,
training takes them from the table the encoder fills (keyed by the tokenizer's content, the
passage input format and the maximum length, ``storage.passage_tokens``): the passages it lacks
are tokenized once, in worker processes, and added, so the next training or encoding with the
same tokenizer tokenizes none of them. A step then only gathers and pads rows.

Rank 0 adds what is missing; other ranks of a multi-GPU run only read (one writer), and tokenize
for themselves what is not stored yet. Examples without passage ids (an old examples file) or a
retriever whose tokenizer cannot be stored are tokenized at each step, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from ..pipelines.dense.sharded_encoding import TokenizedShard, shard_tokens, token_feed
from ..storage import Workspace
from ..storage.passage_tokens import PassageTokenStore
from .data import TrainingExample

log = logging.getLogger(__name__)


class TrainingPassageTokens:
    """Token rows of every passage the training examples name, found by passage id."""

    def __init__(self, tokens: TokenizedShard, positions: dict[str, int], tokenized: int, reused: int) -> None:
        self.tokens = tokens
        self.positions = positions
        self.tokenized = tokenized  # passages tokenized to build this (and added to the table by rank 0)
        self.reused = reused  # passages whose ids came from the table

    def covers(self, ids: Sequence[str | None]) -> bool:
        return all(i is not None and i in self.positions for i in ids)

    def padded(self, ids: Sequence[str]) -> dict[str, torch.Tensor]:
        """What ``Retriever.tokenize_passages`` returns for these passages: tensors padded to the longest."""
        return self.tokens.batch(np.array([self.positions[i] for i in ids], np.int64))

    def unpadded(self, ids: Sequence[str]) -> dict[str, list[list[int]]]:
        """What ``Retriever.passage_token_rows`` returns: each passage's ids (and masks), unpadded."""
        rows: dict[str, list[list[int]]] = {key: [] for key in self.tokens.pad_values}
        for passage_id in ids:
            at = self.positions[passage_id]
            start, length = int(self.tokens.starts[at]), int(self.tokens.lengths[at])
            for key in rows:
                if key == "attention_mask":
                    rows[key].append([1] * length)
                else:
                    rows[key].append(self.tokens.flat[key][start:start + length].astype(np.int64).tolist())
        return rows


def training_passages(examples: Sequence[TrainingExample]) -> tuple[list[str], list[str], list[str]] | None:
    """(ids, titles, texts) of every distinct positive and hard negative; None when some passage
    has no id (it could not be looked up)."""
    seen: dict[str, tuple[str, str]] = {}
    for example in examples:
        if example.positive_id is None or len(example.hard_negative_ids) != len(example.hard_negatives):
            return None
        seen.setdefault(example.positive_id, example.positive)
        for passage_id, passage in zip(example.hard_negative_ids, example.hard_negatives, strict=True):
            seen.setdefault(passage_id, passage)
    ids = list(seen)
    return ids, [seen[i][0] for i in ids], [seen[i][1] for i in ids]


def load_training_tokens(retriever: object, examples: Sequence[TrainingExample], workspace: str | Path | None,
                         *, write: bool = True, workers: int | None = None) -> TrainingPassageTokens | None:  # fmt: skip
    """The training passages' tokens from ``workspace``'s `passage_tokens` table (the missing
    ones tokenized, and added when ``write``); None without a workspace, for examples without
    passage ids, or for a retriever whose tokens cannot be stored."""
    if not workspace or not Path(workspace).is_dir():
        return None
    passages = training_passages(examples)
    if passages is None or not passages[0]:
        return None
    make = getattr(retriever, "passage_tokenizer", None)
    tokenizer = make() if callable(make) else None
    if tokenizer is None:
        return None
    store = PassageTokenStore(Workspace.resolve(workspace), tokenizer.tokenization())
    feed = token_feed(retriever, store, passages_version="training", workers=workers, write=write)
    if feed is None:
        return None
    ids, titles, texts = passages
    try:
        tokens = shard_tokens(retriever, feed, pa.array(ids, pa.string()), titles, texts)
    finally:
        feed.close()
    if tokens is None:
        return None
    log.info("training passages: %d token rows from passage_tokens, %d tokenized%s", feed.reused, feed.tokenized,
             " and stored" if write else "")  # fmt: skip
    return TrainingPassageTokens(tokens, {passage_id: i for i, passage_id in enumerate(ids)}, feed.tokenized,
                                 feed.reused)  # fmt: skip
