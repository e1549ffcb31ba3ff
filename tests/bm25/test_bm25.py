"""BM25 with the real pyserini/Lucene: index, search, staleness, hard negatives."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from odqa.pipelines.evaluation.answers import AnswerMatcher, has_answer
from odqa.pipelines.retrieval.bm25 import (
    METADATA_FILE,
    SHORT_RUN_JVM_OPTIONS,
    SHORT_RUN_PASSAGES,
    IndexBuildError,
    IndexMissingError,
    StaleIndexError,
    build_bm25_index,
    open_bm25_index,
    passage_contents,
    pyserini_index_command,
)
from odqa.pipelines.retrieval.negatives import select_hard_negatives
from odqa.pipelines.search.bm25_searcher import Bm25Searcher, SearcherClosedError
from odqa.pipelines.search.searcher import Searcher, search_run


def _run(searcher: Bm25Searcher, pairs: list[tuple[str, str]], k: int, chunk: int = 1024) -> pa.Table:
    questions = pa.table({"question_id": [q for q, _ in pairs], "question": [text for _, text in pairs]})
    return pa.concat_tables(search_run(searcher, questions, k, chunk))

PASSAGES = [
    ("p1", "Paris", "Paris is the capital and most populous city of France."),
    ("p2", "France", "France is a country in Western Europe. Its capital city is Paris."),
    ("p3", "Lyon", "Lyon is the third-largest city of France, after Paris and Marseille."),
    ("p4", "Berlin", "Berlin is the capital and largest city of Germany."),
    ("p5", "Capital city", "A capital city is the municipality holding primary status in a country."),
    ("p6", "Madrid", "Madrid is the capital and most populous city of Spain."),
    ("p7", "Caf\u00e9 de Flore", "The Caf\u00e9 de Flore is a coffeehouse in Paris."),
    ("p8", "Rome", "Rome is the capital city of Italy."),
]
TEXTS = {pid: passage_contents(title, text) for pid, title, text in PASSAGES}


@pytest.fixture(scope="module")
def index(java: None, tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("bm25") / "index"
    info = build_bm25_index(iter(PASSAGES), path, snapshot="snap-1", threads=2)
    assert info.documents == len(PASSAGES) and info.skipped_empty == 0
    return open_bm25_index(path, "snap-1")


@pytest.fixture(scope="module")
def searcher(index):
    searcher = Bm25Searcher(index, threads=2)
    assert isinstance(searcher, Searcher)
    yield searcher
    searcher.close()


def test_search_ranks_the_obvious_passage_first(searcher: Bm25Searcher) -> None:
    questions = [("q1", "What is the capital of Germany?"), ("q2", "capital of Spain"), ("q3", "xyzzy")]
    run = _run(searcher, questions, k=3, chunk=2)
    assert run.column_names == ["question_id", "passage_id", "rank", "score"]
    rows = run.to_pylist()
    q1 = [r for r in rows if r["question_id"] == "q1"]
    assert [r["rank"] for r in q1] == [1, 2, 3]
    assert q1[0]["passage_id"] == "p4"
    assert q1[0]["score"] >= q1[1]["score"] >= q1[2]["score"] > 0
    assert [r["passage_id"] for r in rows if r["question_id"] == "q2"][0] == "p6"
    assert not [r for r in rows if r["question_id"] == "q3"]  # no term in the index: no rows
    # the title is indexed too: "Rome" appears in p8's title and text, "Flore" in p7's title
    only_title = searcher.search(["Flore coffeehouse"], k=1).ranked()
    assert only_title[0][0][0] == "p7"
    with pytest.raises(ValueError, match="unique"):
        _run(searcher, [("q", "Paris"), ("q", "Rome")], k=1, chunk=1)


def test_k1_b_are_applied(index) -> None:
    default = Bm25Searcher(index, threads=1)
    other = Bm25Searcher(index, k1=2.0, b=1.0, threads=1)
    query = ["capital city of France Paris"]
    first = [score for _, score in default.search(query, k=8).ranked()[0]]
    second = [score for _, score in other.search(query, k=8).ranked()[0]]
    assert first != second
    assert other.describe() == {"k1": 2.0, "b": 1.0, "index_snapshot": "snap-1"}


def test_index_metadata_and_staleness(index, tmp_path: Path) -> None:
    assert index.snapshot == "snap-1" and index.documents == len(PASSAGES)
    assert (index.path / METADATA_FILE).is_file()
    with pytest.raises(StaleIndexError, match="snap-2"):
        open_bm25_index(index.path, "snap-2")
    with pytest.raises(IndexMissingError, match="no BM25 index"):
        open_bm25_index(tmp_path / "nowhere", "snap-1")


def test_rebuild_replaces_index_and_leaves_no_temporaries(java: None, tmp_path: Path) -> None:
    path = tmp_path / "idx"
    build_bm25_index(iter(PASSAGES[:3]), path, snapshot="a", threads=1)
    build_bm25_index(iter(PASSAGES), path, snapshot="b", threads=1)
    info = open_bm25_index(path, "b")
    assert info.documents == len(PASSAGES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    # a failed build (nothing indexable: the one id breaks the passage-id rule) keeps the previous index
    with pytest.raises(IndexBuildError, match=r"no passages to index \(1 skipped"):
        build_bm25_index(iter([("bad id", "t", "x")]), path, snapshot="c", threads=1)
    assert open_bm25_index(path, "b").documents == len(PASSAGES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_hard_negatives_never_contain_answers(searcher: Bm25Searcher) -> None:
    questions = pa.table(
        {
            "question_id": ["q1", "q2", "q3"],
            "question": ["capital city of France", "capital of Italy", "most populous city capital"],
            "answers": pa.array([["Paris"], ["Rome"], ["Madrid", "Berlin"]], type=pa.list_(pa.string())),
            "positive_ids": pa.array([["p1"], [], ["p6"]], type=pa.list_(pa.string())),
        }
    )
    pairs = list(zip(questions["question_id"].to_pylist(), questions["question"].to_pylist(), strict=True))
    run = _run(searcher, pairs, k=8)
    matcher = AnswerMatcher(TEXTS)
    negatives = select_hard_negatives(run, questions, matcher, count=3)
    ranked = {
        qid: [
            r["passage_id"]
            for r in sorted(run.to_pylist(), key=lambda r: r["rank"])
            if r["question_id"] == qid
        ]
        for qid in ["q1", "q2", "q3"]
    }
    for row, answers, positives in zip(
        negatives.to_pylist(),
        questions["answers"].to_pylist(),
        questions["positive_ids"].to_pylist(),
        strict=True,
    ):
        chosen = row["hard_negative_ids"]
        assert 1 <= len(chosen) <= 3
        assert not any(has_answer(TEXTS[pid], answers) for pid in chosen)
        assert not set(chosen) & set(positives)
        # they are the best-ranked clean passages, in rank order
        clean = [
            p for p in ranked[row["question_id"]] if p not in positives and not has_answer(TEXTS[p], answers)
        ]
        assert chosen == clean[:3]
    one = select_hard_negatives(run, questions, matcher)  # DPR default: one per question
    assert all(len(ids) == 1 for ids in one["hard_negative_ids"].to_pylist())
    with pytest.raises(ValueError, match="between 1 and 30"):
        select_hard_negatives(run, questions, matcher, count=31)


def test_a_short_indexer_run_starts_a_lighter_jvm(tmp_path: Path) -> None:
    """Up to SHORT_RUN_PASSAGES the indexer's JVM gets C1 and the serial GC (start-up dominates);
    past it, the JVM's defaults. The JVM options must come before pyserini starts it."""
    small = pyserini_index_command(tmp_path / "c", tmp_path / "i", 1, SHORT_RUN_PASSAGES)
    large = pyserini_index_command(tmp_path / "c", tmp_path / "i", 1, SHORT_RUN_PASSAGES + 1)
    assert small[3:] == large[3:] and small[3:5] == ["-input", str(tmp_path / "c")]
    code = small[2]
    assert all(option in code for option in SHORT_RUN_JVM_OPTIONS)
    assert code.index("add_options") < code.index("pyserini.pyclass")
    assert not any(option in large[2] for option in SHORT_RUN_JVM_OPTIONS)


def test_close_waits_for_the_running_search_and_later_searches_refuse(index) -> None:
    """A retired release's searcher is closed while a batch may still be searching: that batch
    finishes with its hits (closing under it failed it inside the JVM), and a later search gets
    `SearcherClosedError`, not a Java exception."""
    searcher = Bm25Searcher(index, threads=1)
    questions = [f"capital city of Italy {n}" for n in range(4000)]
    outcomes: list[object] = []
    started = threading.Event()

    def search_until_closed() -> None:
        while True:
            started.set()
            try:
                outcomes.append(searcher.search(questions, k=3).ranked()[0][0][0])
            except Exception as error:  # noqa: BLE001 - the outcome under test
                outcomes.append(error)
                return

    thread = threading.Thread(target=search_until_closed)
    thread.start()
    started.wait()
    time.sleep(0.3)
    searcher.close()
    thread.join(60)
    *answers, last = outcomes
    assert answers and set(answers) == {"p8"}, outcomes[-3:]
    assert isinstance(last, SearcherClosedError), repr(last)
    searcher.close()  # again: nothing
