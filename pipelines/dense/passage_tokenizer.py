"""A model's passage tokenizer as a small picklable object, and worker processes that run it.

Token ids depend only on the tokenizer (its vocabulary, normalizer, pre-tokenizer and special
tokens: what its ``tokenizer.json`` holds), on how a passage becomes the tokenizer's input
(title and text as a pair, or DESIRE-ME's joined lowercase string) and on the maximum length.
``PassageTokenizer`` holds exactly those: the Rust ``tokenizers.Tokenizer`` behind a Hugging Face
fast tokenizer, set to truncate as ``Retriever.tokenize_passages`` does and never to pad. Its
fingerprint hashes the tokenizer's serialized content, not its name or folder, so every model
sharing a tokenizer (every MiniLM or BERT-uncased model, each round of training) shares stored
token ids (``storage.passage_tokens``).

Tokenizing runs in worker processes (``TokenizePool``), not in threads beside the one that
drives the device: a worker imports only ``tokenizers`` and numpy, gets the tokenizer once, and
returns flat arrays (the compact ids, lengths, segment ids), so the parent copies no Python lists.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import pickle
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...storage.passage_tokens import Tokenization, TokenRows, id_dtype, id_width

WORKER_CHUNK = 2048  # passages per task handed to a tokenizer process
MIN_PASSAGES_FOR_WORKERS = 8192  # fewer are tokenized in this process: starting workers costs more


def passage_arguments(titles: Sequence[str | None], texts: Sequence[str], passage_input: str) -> tuple[list[str], ...]:
    """The tokenizer's text arguments for passages: the pair (titles, texts), or with
    ``joined-lowercase`` (DESIRE-ME's reference code) one string "title text"."""
    if len(titles) != len(texts):
        raise ValueError(f"got {len(titles)} titles for {len(texts)} passage texts")
    if passage_input == "joined-lowercase":
        return ([f"{t or ''} {x}".strip().lower() for t, x in zip(titles, texts, strict=True)],)
    if passage_input != "pair":
        raise ValueError(f"passage_input must be pair or joined-lowercase, got {passage_input!r}")
    return [t or "" for t in titles], list(texts)


@dataclass(frozen=True)
class PassageTokenizer:
    """What turns passages into token ids: a truncating, non-padding Rust tokenizer, the input
    format and the maximum length. Picklable, so worker processes get it whole."""

    backend: Any  # tokenizers.Tokenizer, truncation set, padding off
    passage_input: str
    max_length: int
    _fingerprint: list[str] = field(default_factory=list, compare=False, repr=False)  # computed once

    @classmethod
    def from_hf(cls, tokenizer: Any, passage_input: str, max_length: int) -> PassageTokenizer | None:
        """The Rust tokenizer of a Hugging Face fast tokenizer, set up as its ``__call__`` with
        ``truncation="longest_first", max_length=max_length`` and no padding uses it; None for a
        slow (Python) tokenizer, whose passages are tokenized as before and not stored."""
        if not getattr(tokenizer, "is_fast", False):
            return None
        backend = pickle.loads(pickle.dumps(tokenizer.backend_tokenizer))  # a copy: the model's own keeps its state
        backend.no_padding()
        backend.enable_truncation(max_length, stride=0, strategy="longest_first",
                                  direction=getattr(tokenizer, "truncation_side", "right"))
        return cls(backend, passage_input, max_length)

    def fingerprint(self) -> str:
        """SHA-256 of the tokenizer's content (vocabulary, normalizer, pre-tokenizer, post-processor,
        added tokens), with the per-call truncation and padding settings left out."""
        if not self._fingerprint:
            content = json.loads(self.backend.to_str())
            content.pop("truncation", None)
            content.pop("padding", None)
            self._fingerprint.append(hashlib.sha256(json.dumps(content, sort_keys=True).encode("utf-8")).hexdigest())
        return self._fingerprint[0]

    def tokenization(self) -> Tokenization:
        """The key the stored token ids of this tokenizer, format and length live under."""
        return Tokenization(tokenizer=self.fingerprint(), passage_input=self.passage_input,
                            max_length=self.max_length,
                            id_width=id_width(self.backend.get_vocab_size(with_added_tokens=True)))

    def encode(self, titles: Sequence[str | None], texts: Sequence[str]) -> TokenRows:
        """Token ids (compact dtype), segment ids and lengths of the passages, unpadded."""
        arguments = passage_arguments(titles, texts, self.passage_input)
        inputs = list(zip(*arguments, strict=True)) if len(arguments) == 2 else arguments[0]
        encodings = self.backend.encode_batch(inputs, add_special_tokens=True)
        dtype = id_dtype(id_width(self.backend.get_vocab_size(with_added_tokens=True)))
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int32, count=len(encodings))
        if not encodings:
            return TokenRows(np.zeros(0, dtype), np.zeros(0, np.uint8), lengths)
        ids = np.fromiter((i for e in encodings for i in e.ids), dtype=dtype, count=int(lengths.sum()))
        types = np.fromiter((t for e in encodings for t in e.type_ids), dtype=np.uint8, count=int(lengths.sum()))
        return TokenRows(ids, types, lengths)


_WORKER_TOKENIZER: PassageTokenizer | None = None


def _start_worker(tokenizer: PassageTokenizer) -> None:
    global _WORKER_TOKENIZER
    # A worker is one of the cores the pool was sized to: the Rust tokenizer's own thread pool
    # (one thread per core in every worker, unless the user turned it off) would put
    # workers x cores threads on the machine, the device thread's core among them.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER_TOKENIZER = tokenizer


def _encode_in_worker(titles: list[str | None], texts: list[str]) -> TokenRows:
    assert _WORKER_TOKENIZER is not None, "worker started without its tokenizer"
    return _WORKER_TOKENIZER.encode(titles, texts)


def default_tokenize_workers() -> int:
    """One core is left to the thread that drives the device; the others tokenize."""
    return max(1, (os.cpu_count() or 2) - 1)


class TokenizePool:
    """Tokenizer worker processes for one tokenizer, started on the first large request.

    ``workers=0`` tokenizes in the calling process. A request below ``min_passages`` is
    tokenized in the calling process too: a spawned worker takes about a second to start, which
    a few thousand passages do not repay. Close it (or use it as a context manager) to stop them.
    """

    def __init__(self, tokenizer: PassageTokenizer, workers: int | None = None,
                 min_passages: int = MIN_PASSAGES_FOR_WORKERS) -> None:  # fmt: skip
        self.tokenizer = tokenizer
        self.workers = default_tokenize_workers() if workers is None else workers
        self.min_passages = min_passages
        self._pool: ProcessPoolExecutor | None = None

    def encode(self, titles: Sequence[str | None], texts: Sequence[str]) -> TokenRows:
        """Token rows of the passages, in their order."""
        if self.workers < 1 or len(texts) < self.min_passages:
            return self.tokenizer.encode(titles, texts)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start_worker, initargs=(self.tokenizer,))
        starts = range(0, len(texts), WORKER_CHUNK)
        parts = self._pool.map(_encode_in_worker, [list(titles[s:s + WORKER_CHUNK]) for s in starts],
                               [list(texts[s:s + WORKER_CHUNK]) for s in starts])
        return TokenRows.concat(list(parts))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> TokenizePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
