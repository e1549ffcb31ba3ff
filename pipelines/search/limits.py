"""How many passages one question may ask for: one limit for every way in.

`odqa search --k`, `odqa retrieve --k`, mining depths, `Searcher.search(..., k=)` of the Python
API, the LangChain retriever and the service's `/search` and `/v1` routes all check `k` with
`checked_k`, and every searcher checks it again before it searches. The limit is
`DEFAULT_MAX_K` passages per question unless the environment variable `ODQA_MAX_K` raises or
lowers it (for a service, in the environment of `odqa serve`).

Below the limit, searchers still never allocate for more passages than their index holds: BM25
asks Lucene for at most `min(k, documents)` (`within_corpus`) and a FAISS index searches at most
its own size (`DenseIndex.search_run`), so `k=10**8` over 217 passages costs what `k=217` does.
"""

from __future__ import annotations

import operator
import os

MAX_K_ENV = "ODQA_MAX_K"
DEFAULT_MAX_K = 10_000


def max_k() -> int:
    """The most passages one question may ask for: `$ODQA_MAX_K`, else `DEFAULT_MAX_K`."""
    text = os.environ.get(MAX_K_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_K
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{MAX_K_ENV}={text[:20]!r} is not a whole number of at least 1 (the most passages one "
                         f"question may ask for; unset it for the default of {DEFAULT_MAX_K:,})")  # fmt: skip
    return int(text)


def checked_k(k: int, name: str = "k") -> int:
    """`k` when it is a whole number from 1 to `max_k()`; else ValueError naming the limit and
    how to raise it (TypeError for a k that is not an int)."""
    try:
        if isinstance(k, bool):
            raise TypeError
        k = operator.index(k)  # an int, or a numpy integer
    except TypeError:
        raise TypeError(f"{name} must be a whole number, got {type(k).__name__} {k!r}") from None
    if k < 1:
        raise ValueError(f"{name} must be at least 1, got {k}")
    limit = max_k()
    if k > limit:
        raise ValueError(f"{name}={k:,} is over the limit of {limit:,} passages per question; ask for fewer, or "
                         f"raise the limit with the environment variable {MAX_K_ENV} (e.g. {MAX_K_ENV}={k})")  # fmt: skip
    return k


def within_corpus(k: int, documents: int) -> int:
    """What a searcher asks its index for: `k` (checked), at most the `documents` it holds (and
    at least 1, which an empty index answers with nothing)."""
    return max(1, min(checked_k(k), documents))
