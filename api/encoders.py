"""odqa's models behind BEIR's model interface (`encode_queries`, `encode_corpus`), so BEIR's
`DenseRetrievalExactSearch`, MTEB or a notebook can encode with an odqa model and get the same
vectors odqa's own indexes hold.

A query-side fine-tuned model (QSFT) encodes questions with its own weights and passages with the
model whose index it searches, as odqa does; resolving that needs the workspace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..models.base import Retriever
from ..storage.model_registry import QSFT_FILE, resolve_model
from ..storage.workspace import Workspace as StorageWorkspace

Corpus = Sequence[Mapping[str, str]] | Mapping[str, Sequence[str]]


def _titles_and_texts(corpus: Corpus) -> tuple[list[str], list[str]]:
    """BEIR passes a list of {"title", "text"} dicts (some versions a dict of two lists)."""
    if isinstance(corpus, Mapping):
        texts = list(corpus["text"])
        titles = list(corpus.get("title") or [""] * len(texts))
        if len(titles) != len(texts):
            raise ValueError(f"corpus has {len(titles)} titles for {len(texts)} texts")
        return [t or "" for t in titles], [t or "" for t in texts]
    titles, texts = [], []
    for number, doc in enumerate(corpus):
        if not isinstance(doc, Mapping) or "text" not in doc:
            raise ValueError(f"corpus item {number} is not a {{'title', 'text'}} dict: {str(doc)[:80]!r}")
        titles.append(doc.get("title") or "")
        texts.append(doc["text"] or "")
    return titles, texts


def _as_output(vectors: np.ndarray, kwargs: Mapping[str, Any]) -> Any:
    """numpy, or a torch tensor when BEIR asks for one (`convert_to_tensor=True`)."""
    if kwargs.get("convert_to_tensor"):
        import torch

        return torch.from_numpy(vectors)
    return vectors


class BeirRetriever:
    """An odqa model with BEIR's interface; `similarity` is the score BEIR should use
    (`dot` or `cos_sim`), the one odqa searches with."""

    def __init__(self, question_model: Retriever, passage_model: Retriever, name: str) -> None:
        self.question_model = question_model
        self.passage_model = passage_model
        self.name = name

    @property
    def similarity(self) -> str:
        return "cos_sim" if self.question_model.similarity == "cosine" else "dot"

    def encode_queries(self, queries: Sequence[str], batch_size: int = 64, **kwargs: Any) -> Any:
        """Question vectors, float32 (len(queries), dim)."""
        if isinstance(queries, str):
            raise TypeError("encode_queries takes a list of queries")
        vectors = self.question_model.encode_questions([str(q) for q in queries], batch_size=batch_size,
                                                       show_progress=bool(kwargs.get("show_progress_bar")))  # fmt: skip
        return _as_output(vectors, kwargs)

    def encode_corpus(self, corpus: Corpus, batch_size: int = 64, **kwargs: Any) -> Any:
        """Passage vectors of {"title", "text"} items, float32 (len(corpus), dim), encoded as odqa
        encodes its passages (title and text as the model's passage format puts them)."""
        titles, texts = _titles_and_texts(corpus)
        vectors = self.passage_model.encode_passages(titles, texts, batch_size=batch_size,
                                                     show_progress=bool(kwargs.get("show_progress_bar")))  # fmt: skip
        return _as_output(vectors, kwargs)


def load_retriever(model_or_path: str | Path, workspace: Any = None) -> BeirRetriever:
    """The model `model_or_path` names: with a workspace (path or `odqa.Workspace`), a model id of
    its `models` table, a folder or a Hugging Face name; without one, a folder or a name."""
    from ..models.retriever import load_retriever as load_model

    name = str(model_or_path)
    if workspace is None:
        if (Path(name) / QSFT_FILE).is_file():
            raise ValueError(f"{name} is a query-side fine-tune: pass workspace= so its passage model can be found")
        model = load_model(name)
        return BeirRetriever(model, model, name)
    ws = getattr(workspace, "storage", None) or StorageWorkspace.open_existing(workspace)
    ref = resolve_model(ws, name)
    question_model = load_model(ref.path)
    passage_model = question_model if ref.shares_passage_side else load_model(ref.passage_path)
    return BeirRetriever(question_model, passage_model, name)
