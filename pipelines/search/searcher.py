"""The searcher interface, and the loop that turns a searcher into run rows for many questions."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from ...storage.choices import RetrieverKind
from ..progress import progress
from .hits import Hits
from .limits import checked_k

QUESTION_CHUNK = 1024  # questions searched per step of a run


@runtime_checkable
class Searcher(Protocol):
    """Anything that answers questions with their top passages (BM25, dense, hybrid)."""

    kind: RetrieverKind

    @property
    def passages_version(self) -> str:
        """The passages table version its index was built from: the texts its passage ids name
        are that version's (a later import may have changed them)."""
        ...

    def search(self, questions: Sequence[str], k: int) -> Hits:
        """The top `k` passages of each question, best first."""
        ...

    def describe(self) -> dict[str, Any]:
        """What identifies this searcher's answers (recorded with a run, part of its fingerprint)."""
        ...

    def close(self) -> None: ...


def search_run(searcher: Searcher, questions: pa.Table, k: int, chunk: int = QUESTION_CHUNK) -> Iterator[pa.Table]:
    """Run rows (question_id, passage_id, rank, score) of every question of `questions` (columns
    question_id, question), `chunk` questions at a time. The same chunks give the same rows
    whichever process searches them (encoders pad within what they are given)."""
    checked_k(k)
    ids = questions.column("question_id").cast(pa.string()).combine_chunks()
    texts = questions.column("question").to_pylist()
    if len(set(ids.to_pylist())) != len(ids):
        raise ValueError("question ids must be unique within a run")
    with progress(len(ids), f"{searcher.kind} search", "questions") as bar:
        for start in range(0, len(ids), chunk):
            found = searcher.search(texts[start:start + chunk], k)
            bar.update(found.count)  # before the yield: a consumer may stop after the last chunk
            yield found.run(ids.slice(start, chunk))
