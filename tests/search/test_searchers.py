"""The searcher interface: hits as run tables, runs in chunks, hybrid fusion, index freshness."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from odqa.pipelines.dense.faiss_index import IndexMetadata
from odqa.pipelines.dense.hybrid import fuse, fusion_candidates
from odqa.pipelines.search.freshness import dense_index_problem
from odqa.pipelines.search.hits import Hits
from odqa.pipelines.search.hybrid_searcher import HybridSearcher, fused_hits
from odqa.pipelines.search.searcher import Searcher, search_run

PASSAGES = {"p1": "paris is the capital of france", "p2": "berlin is the capital of germany",
            "p3": "the seine flows through paris", "p4": "rome is in italy"}  # fmt: skip


class WordOverlap:
    """A small exact searcher: score = shared words (ties by passage id). Enough to exercise the
    interface's contracts without a JVM or a model."""

    kind = "overlap"

    def __init__(self, weight: float = 1.0, passages_version: str = "v1") -> None:
        self.weight = weight
        self.passages_version = passages_version
        self.calls: list[int] = []

    def search(self, questions: Sequence[str], k: int) -> Hits:
        self.calls.append(len(questions))
        ranked = []
        for question in questions:
            words = set(question.lower().split())
            scored = [(pid, self.weight * len(words & set(text.split()))) for pid, text in PASSAGES.items()]
            ranked.append(sorted([h for h in scored if h[1] > 0], key=lambda h: (-h[1], h[0]))[:k])
        return Hits.from_ranked(ranked)

    def describe(self) -> dict[str, Any]:
        return {"weight": self.weight}

    def close(self) -> None:
        """Nothing to release."""


def test_hits_keep_per_question_order_and_map_to_run_rows() -> None:
    hits = Hits.from_ranked([[("p1", 2.0), ("p3", 1.0)], [], [("p4", 0.5)]])
    assert hits.count == 3 and hits.ranked() == [[("p1", 2.0), ("p3", 1.0)], [], [("p4", 0.5)]]
    assert hits.top(1).ranked() == [[("p1", 2.0)], [], [("p4", 0.5)]]
    run = hits.run(pa.array(["qa", "qb", "qc"]))
    assert run.column_names == ["question_id", "passage_id", "rank", "score"]
    assert run.to_pylist()[0] == {"question_id": "qa", "passage_id": "p1", "rank": 1, "score": 2.0}
    assert run.column("question_id").to_pylist() == ["qa", "qa", "qc"]
    with pytest.raises(ValueError, match="2 question ids for 3 questions"):
        hits.run(pa.array(["qa", "qb"]))


def test_a_run_is_searched_in_chunks_with_the_questions_ids() -> None:
    searcher = WordOverlap()
    assert isinstance(searcher, Searcher)
    questions = pa.table({"question_id": ["a", "b", "c"],
                          "question": ["capital of france", "seine paris", "nothing matches"]})  # fmt: skip
    run = pa.concat_tables(list(search_run(searcher, questions, k=2, chunk=2)))
    assert searcher.calls == [2, 1]
    assert {(r["question_id"], r["rank"]): r["passage_id"] for r in run.to_pylist()} == {
        ("a", 1): "p1", ("a", 2): "p2", ("b", 1): "p3", ("b", 2): "p1"}
    with pytest.raises(ValueError, match="unique"):
        list(search_run(searcher, pa.table({"question_id": ["a", "a"], "question": ["x", "y"]}), k=1))


def test_hybrid_search_is_taser_fusion_of_both_sides() -> None:
    dense, sparse = WordOverlap(1.0), WordOverlap(3.0)
    hybrid = HybridSearcher(dense, sparse, alpha=0.7, depth=3)
    questions = ["capital of france", "paris seine"]
    got = hybrid.search(questions, 2)
    want = fuse(fusion_candidates(dense.search(questions, 3).table, sparse.search(questions, 3).table, 3), 0.7, 2)
    assert got.table.equals(Hits.from_run(want, 2).table)
    assert fused_hits(dense.search(questions, 3), sparse.search(questions, 3), 0.7, 2, 3).ranked() == got.ranked()
    assert hybrid.describe() == {"weight": 1.0, "alpha": 0.7, "depth": 3, "bm25": {"weight": 3.0}}
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        HybridSearcher(dense, sparse, alpha=-1)
    assert hybrid.passages_version == "v1"


def test_a_hybrid_refuses_indexes_of_two_passages_versions() -> None:
    """Fused ids must all name passages of one corpus: their texts are read from that version."""
    with pytest.raises(ValueError, match="dense index is of passages v1 and the BM25 index of passages v2"):
        HybridSearcher(WordOverlap(1.0), WordOverlap(3.0, passages_version="v2"), alpha=0.5)


def test_freshness_is_decided_from_fingerprints() -> None:
    meta = IndexMetadata(model_fingerprint="m1", corpus_fingerprint="v1", index_type="flat", params={}, dim=4,
                         similarity="dot", num_vectors=4)  # fmt: skip
    fresh = {"passages_version": "v1", "model_fingerprint": "m1", "model": "dpr", "index_type": "flat"}
    assert dense_index_problem(meta, **fresh) is None
    assert dense_index_problem(None, **fresh) == "no flat index for model dpr"
    assert "stale (passages changed)" in dense_index_problem(meta, **{**fresh, "passages_version": "v2"})
    assert "stale (model changed)" in dense_index_problem(meta, **{**fresh, "model_fingerprint": "m2"})
