"""`odqa negatives bm25`: DPR's BM25 hard negatives into `questions.hard_negative_ids`.

Per question, the `count` best BM25 passages (of the top `depth`) that contain no answer (title
or text) and are not positives. What a search found is kept by question content (text, answers,
positives; `pipelines.retrieval.negatives.negatives_keys`) for its index and parameters, so the same
question under another id or split (the training copies `odqa experiment` makes per architecture)
is not searched again: the report counts `searched` and `reused`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from prefect import flow

from ...models.searchers import RetrieverChoice, open_searcher
from ...pipelines.evaluation.answers import AnswerMatcher
from ...pipelines.retrieval.bm25 import DEFAULT_B, DEFAULT_K1
from ...pipelines.retrieval.negatives import (
    MAX_HARD_NEGATIVES,
    SEARCHED_NEGATIVES_SCHEMA,
    negatives_keys,
    select_hard_negatives,
)
from ...pipelines.search.searcher import Searcher, search_run
from ...storage import Workspace
from ...storage.fingerprint import fingerprint
from ...storage.index_layout import IndexLayout
from ...storage.passages import passage_texts
from ...storage.questions import load_questions, questions_fingerprint, set_hard_negatives
from ...storage.reports import Report
from ..plumbing.bounds import AtLeastOne, BM25Negatives, NotNegative, UnitInterval
from ..plumbing.report_text import log_report
from ..plumbing.skip_unchanged import finished_report

QUESTION_COLUMNS = ["question_id", "question", "answers", "positive_ids"]


@dataclass
class Bm25NegativesReport(Report):
    dataset: str
    split: str
    count: int
    depth: int
    questions: int
    questions_updated: int
    with_full_count: int
    without_negative: int
    index_snapshot: str
    searched: int = 0  # questions searched now
    reused: int = 0  # questions whose negatives an earlier search of the same question, index and parameters found


def negatives_stage(dataset: str, split: str) -> str:
    """The ledger name of a question set's BM25 negatives (the pipeline checks it is still there)."""
    return f"negatives-bm25:{dataset}:{split}"


@flow(name="negatives-bm25")
def bm25_negatives_flow(
    dataset: str,
    split: str,
    count: BM25Negatives = 1,
    depth: AtLeastOne = 100,
    k1: NotNegative = DEFAULT_K1,
    b: UnitInterval = DEFAULT_B,
    threads: AtLeastOne | None = None,
    workspace: str | None = None,
) -> Bm25NegativesReport:
    """DPR's BM25 hard negatives: per question, the `count` best BM25 passages (of the top
    `depth`) that contain no answer (title or text) and are not positives.

    Args:
        dataset: Dataset whose questions get hard negatives (train uses them).
        split: Split of the dataset, e.g. train.
        count: Hard negatives kept per question (1 to 30).
        depth: BM25 passages searched per question.
        k1: BM25 k1.
        b: BM25 b.
        threads: Search threads; empty: all cores.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
    """
    if not 1 <= count <= MAX_HARD_NEGATIVES:
        raise ValueError(f"--count must be between 1 and {MAX_HARD_NEGATIVES}, got {count}")
    ws = Workspace.resolve(workspace)
    opened = open_searcher(ws, RetrieverChoice(kind="bm25", k1=k1, b=b, threads=threads))
    try:
        stage = negatives_stage(dataset, split)
        snapshot = opened.config["index_snapshot"]
        stage_fp = fingerprint(stage, count, depth, k1, b, snapshot,
                               questions_fingerprint(ws, dataset, split, QUESTION_COLUMNS))  # fmt: skip
        done = finished_report(ws, stage, stage_fp, Bm25NegativesReport, "same index, questions and parameters")
        if done is not None:
            return done
        questions = load_questions(ws, dataset, split, QUESTION_COLUMNS)
        keys = negatives_keys(questions)
        layout, searched_before = IndexLayout.of(ws), searched_negatives_name(count, depth, k1, b, snapshot)
        known = _known_negatives(layout.read_negatives(searched_before))
        unknown = questions.filter(pa.array([key not in known for key in keys]))
        if unknown.num_rows:
            known.update(_search_negatives(ws, opened.searcher, unknown, count, depth))
            layout.write_negatives(searched_before, pa.table({"key": list(known), "hard_negative_ids": list(known.values())},
                                                             schema=SEARCHED_NEGATIVES_SCHEMA))  # fmt: skip
    finally:
        opened.searcher.close()
    negatives = {qid: known[key] for qid, key in zip(questions["question_id"].to_pylist(), keys, strict=True)}
    found = [len(ids) for ids in negatives.values()]
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        updated = set_hard_negatives(tx, dataset, split, negatives)
        report = Bm25NegativesReport(dataset=dataset, split=split, count=count, depth=depth, questions=len(negatives),
                                     questions_updated=updated, with_full_count=sum(1 for n in found if n == count),
                                     without_negative=sum(1 for n in found if n == 0), index_snapshot=snapshot,
                                     searched=unknown.num_rows, reused=questions.num_rows - unknown.num_rows)  # fmt: skip
        tx.report = report.ledger()
    log_report(stage, report)
    return report


def searched_negatives_name(count: int, depth: int, k1: float, b: float, snapshot: str) -> str:
    """The file (under `indexes/negatives/`) of every question's negatives found with one index
    and parameters, by question content (`negatives_keys`)."""
    return f"bm25-{fingerprint(count, depth, k1, b, snapshot)[:16]}"


def _known_negatives(searched: pa.Table | None) -> dict[str, list[str]]:
    if searched is None:
        return {}
    return dict(zip(searched["key"].to_pylist(), searched["hard_negative_ids"].to_pylist(), strict=True))


def _search_negatives(ws: Workspace, searcher: Searcher, questions: pa.Table, count: int,
                      depth: int) -> dict[str, list[str]]:  # fmt: skip
    """Negatives of questions no earlier search found, by their `negatives_keys`."""
    run = pa.concat_tables(list(search_run(searcher, questions, max(depth, count))))
    texts, missing = passage_texts(ws, run.column("passage_id").to_pylist(), with_title=True,
                                   version=searcher.passages_version)  # fmt: skip
    if missing:
        raise RuntimeError(f"{missing} passages found by BM25 are not in the passages table; rebuild the index")
    chosen = select_hard_negatives(run, questions, AnswerMatcher(texts), count=count)
    return dict(zip(negatives_keys(questions), chosen["hard_negative_ids"].to_pylist(), strict=True))
