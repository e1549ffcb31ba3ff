"""`odqa positives bm25|dense`: positive passages by distant supervision, for questions that come
with answers only (`question<TAB>answers`, NQ-open, TriviaQA-style, EntityQuestions sets).

DPR's rule (`pipelines.retrieval.distant_positives`): per question without a positive of its own,
the highest-ranked passages of the retriever's top `depth` whose text contains an answer. They go
into `questions.positive_ids`, so `odqa train` (training and `--dev` sets), mining and the BEIR
export use them, and `questions.positives_from` marks them as derived (`bm25`, `dense:<model>`):
evaluation keeps scoring R@K by the answers, and its qrels metrics say which judgments were
derived. Gold positives are never replaced; positives derived earlier are derived again. The
same questions, passages, retriever and parameters again is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pyarrow as pa
from prefect import flow
from pydantic import Field

from ...models.searchers import RetrieverChoice, open_searcher
from ...pipelines.evaluation.answers import AnswerMatcher, match_mode
from ...pipelines.retrieval.distant_positives import (
    DPR_COUNT,
    DPR_DEPTH,
    MAX_DERIVED_POSITIVES,
    needs_positives,
    select_distant_positives,
)
from ...pipelines.search.searcher import search_run
from ...storage import Workspace
from ...storage.choices import IndexType, PositivesRetriever
from ...storage.fingerprint import fingerprint
from ...storage.passages import passage_texts, passages_with_ids
from ...storage.questions import load_questions, set_derived_positives
from ...storage.reports import Report
from ..plumbing.bounds import AtLeastOne
from ..plumbing.report_text import log_report
from ..plumbing.runtime import flow_run_logs
from ..plumbing.skip_unchanged import finished_report
from .index import ensure_dense_index

POSITIVES_COLUMNS = ["question_id", "question", "answers", "positive_ids", "positives_from"]


@dataclass
class PositivesReport(Report):
    dataset: str
    split: str
    derived_by: str  # what `positives_from` says: bm25, or dense:<model>
    depth: int
    count: int
    questions: int
    with_own_positives: int  # gold positives: left as they are
    own_positives_not_in_passages: int  # of those, none names a passage of the passages table
    searched: int  # questions without positives of their own, searched
    derived: int  # of those, given positives: an answer-bearing passage in the top `depth`
    without_positive: int  # none in the top `depth`: training skips them, as DPR discarded them
    derived_share: float  # derived / searched: the retriever's answer-based R@depth on them


def positives_stage(dataset: str, split: str) -> str:
    """The ledger name of a question set's derived positives."""
    return f"positives:{dataset}:{split}"


def derive_command(dataset: str, split: str) -> str:
    """The command that gives a split's answer-only questions positives (errors name it)."""
    return f"odqa positives bm25 --dataset {dataset} --split {split}"


def _own_positives(questions: pa.Table) -> list[list[str]]:
    """Each question's positives that came with the data (empty where they were derived)."""
    return [[] if origin is not None else list(ids or ())
            for ids, origin in zip(questions["positive_ids"].to_pylist(), questions["positives_from"].to_pylist(),
                                   strict=True)]  # fmt: skip


@flow(name="positives")
def derive_positives_flow(
    dataset: str,
    split: str,
    retriever: PositivesRetriever = "bm25",
    model: str | None = None,
    depth: AtLeastOne = DPR_DEPTH,
    count: Annotated[int, Field(ge=1, le=MAX_DERIVED_POSITIVES)] = DPR_COUNT,
    index_type: IndexType = "flat",
    threads: AtLeastOne | None = None,
    workspace: str | None = None,
) -> PositivesReport:
    """Positives by distant supervision (DPR's rule for TriviaQA, WebQuestions, CuratedTREC): for
    each question without a positive of its own, the `count` highest-ranked passages of the
    retriever's top `depth` that contain an answer, marked as derived in `positives_from`.

    Args:
        dataset: Dataset whose answer-only questions get positives.
        split: Split of the dataset, e.g. train or dev.
        retriever: bm25 (DPR's choice; needs the BM25 index) or dense (needs `model`).
        model: dense: model id, Hugging Face name or folder that ranks the passages; its index is
            built when missing.
        depth: Passages looked at per question (DPR: 100); a question with no answer in them
            gets no positive.
        count: Positives kept per question (DPR: 1, the highest-ranked).
        index_type: dense: the model's FAISS index: flat, hnsw or ivfpq.
        threads: bm25: search threads; empty: all cores.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
    """
    if not 1 <= count <= MAX_DERIVED_POSITIVES:
        raise ValueError(f"count must be between 1 and {MAX_DERIVED_POSITIVES}, got {count}")
    if retriever == "dense" and not model:
        raise ValueError("positives from a dense retriever need a model (a model id, Hugging Face name or folder)")
    ws = Workspace.resolve(workspace)
    questions = load_questions(ws, dataset, split, POSITIVES_COLUMNS)
    own = _own_positives(questions)
    choice = RetrieverChoice(kind=retriever, model=model if retriever == "dense" else None, index_type=index_type,
                             threads=threads)  # fmt: skip
    opened = open_searcher(ws, choice, ensure_index=ensure_dense_index)
    try:
        derived_by = "bm25" if opened.ref is None else f"dense:{opened.ref.name}"
        stage = positives_stage(dataset, split)
        matching = match_mode(dataset)
        stage_fp = fingerprint(stage, derived_by, opened.config, depth, count, matching,
                               questions["question_id"].to_pylist(), questions["question"].to_pylist(),
                               questions["answers"].to_pylist(), own)  # fmt: skip
        done = finished_report(ws, stage, stage_fp, PositivesReport, "same questions, index and parameters")
        if done is not None:
            log_report(f"positives {dataset}/{split}", done)
            return done
        wanted = pa.array([needs_positives(ids, origin) for ids, origin in zip(
            questions["positive_ids"].to_pylist(), questions["positives_from"].to_pylist(), strict=True)])  # fmt: skip
        searched = questions.filter(wanted)
        searched_in = opened.searcher.passages_version
        with flow_run_logs():
            run = pa.concat_tables(list(search_run(opened.searcher, searched, depth))) if searched.num_rows else None
    finally:
        opened.searcher.close()
    derived: dict[str, list[str]] = {}
    if run is not None:
        texts, missing = passage_texts(ws, run.column("passage_id").to_pylist(), with_title=False, version=searched_in)
        if missing:
            raise RuntimeError(f"{missing} passages the {retriever} index found are not in the passages table; "
                               "rebuild the index")  # fmt: skip
        chosen = select_distant_positives(run, searched, AnswerMatcher(texts, mode=matching), count=count)
        derived = dict(zip(chosen["question_id"].to_pylist(), chosen["positive_ids"].to_pylist(), strict=True))
    given = sum(1 for ids in derived.values() if ids)
    gold = [ids for ids in own if ids]
    present = set(passages_with_ids(ws, sorted({p for ids in gold for p in ids}))["passage_id"].to_pylist())
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        set_derived_positives(tx, dataset, split, derived, derived_by)
        report = PositivesReport(
            dataset=dataset, split=split, derived_by=derived_by, depth=depth, count=count,
            questions=questions.num_rows, with_own_positives=len(gold),
            own_positives_not_in_passages=sum(1 for ids in gold if not present.intersection(ids)),
            searched=searched.num_rows, derived=given, without_positive=searched.num_rows - given,
            derived_share=round(given / searched.num_rows, 4) if searched.num_rows else 0.0,
        )  # fmt: skip
        tx.report = report.ledger()
    log_report(f"positives {dataset}/{split}", report)
    return report
