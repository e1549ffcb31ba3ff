"""The shape of a loaded dense retriever, as the dense pipeline steps use it.

The steps in this package only need a retriever to turn questions and passages into vectors and
to say which model produced them (so stored embeddings and indexes can be checked for
staleness). Writing against this protocol keeps them usable with every encoder architecture of
``models/`` (DPR, SDE/ADE variants, TASER, DESIRE-ME) and with any object of the same shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np

Similarity = Literal["dot", "cosine"]


@runtime_checkable
class DenseRetriever(Protocol):
    """A bi-encoder: question tower, passage tower, one similarity.

    ``cosine`` retrievers return L2-normalised vectors, so inner product search is exact for
    both similarities and every index here uses inner product.
    """

    embedding_dim: int
    similarity: Similarity

    def encode_questions(
        self, texts: Sequence[str], batch_size: int = 64, device: str | None = None, show_progress: bool = True
    ) -> np.ndarray: ...

    def encode_passages(
        self,
        titles: Sequence[str],
        texts: Sequence[str],
        batch_size: int = 64,
        device: str | None = None,
        show_progress: bool = True,
    ) -> np.ndarray: ...

    def config_fingerprint(self) -> str: ...
