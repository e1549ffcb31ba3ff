"""`odqa tune-hybrid`: TASER's single hybrid weight alpha, chosen on dev questions.

The best dev R@k over alpha in 0.5..2.0 (step 0.1) on the combined dev sets
(`pipelines.dense.hybrid.tune_alpha`). The chosen alpha goes to the model's hybrid settings
(used by hybrid runs and the service without an explicit alpha) and the R@k of every alpha to the
`metrics` table (run `tune-hybrid:<model key>`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from prefect import flow

from ...models.searchers import RetrieverChoice, open_searcher
from ...pipelines.dense.hybrid import candidate_hits, tune_alpha
from ...pipelines.evaluation.answers import match_mode
from ...pipelines.questions.specs import DatasetSpec
from ...pipelines.search.hybrid_searcher import HybridSearcher
from ...pipelines.search.searcher import QUESTION_CHUNK
from ...storage import Workspace
from ...storage.choices import IndexType
from ...storage.fingerprint import fingerprint
from ...storage.index_layout import IndexLayout
from ...storage.metrics import metric_rows
from ...storage.passages import passage_texts
from ...storage.questions import load_questions, questions_fingerprint
from ...storage.releases import current_release
from ...storage.reports import Report
from ..plumbing.bounds import AtLeastOne
from ..plumbing.publish import publish_indexes
from ..plumbing.report_text import log_report
from ..plumbing.runtime import flow_run_logs
from ..plumbing.skip_unchanged import finished_report
from .index import ensure_dense_index

QUESTION_COLUMNS = ["question_id", "question", "answers"]


@dataclass
class TuneHybridReport(Report):
    model: str
    dev: list[str]
    k: int
    depth: int
    index_type: str
    alpha: float
    dev_recall: float  # R@k of the chosen alpha on the dev questions
    dense_only_recall: float  # R@k of the dense ranking alone
    questions: int
    release: str | None = None  # the published release serving this alpha (None: nothing published serves the model)


def _dev_candidates(ws: Workspace, searcher: HybridSearcher, spec: DatasetSpec) -> tuple[pa.Table, np.ndarray, int]:
    """(candidates keyed `<name>:<split>|<question id>`, their answer hits, questions) of one dev set."""
    questions = load_questions(ws, spec.dataset, spec.split, QUESTION_COLUMNS)
    candidates, hits = [], []
    for start in range(0, questions.num_rows, QUESTION_CHUNK):
        chunk = questions.slice(start, QUESTION_CHUNK)
        found = searcher.candidates(chunk.column("question").to_pylist())
        ids = chunk.column("question_id").cast(pa.string()).combine_chunks()
        found = found.set_column(0, "question_id", ids.take(pc.cast(found.column("question_id"), pa.int64())))
        answers = dict(zip(ids.to_pylist(), chunk.column("answers").to_pylist(), strict=True))
        texts, _ = passage_texts(ws, found.column("passage_id").to_pylist(), with_title=False,
                                 version=searcher.passages_version)  # fmt: skip
        hits.append(candidate_hits(found, answers, texts, match_mode(spec.dataset)))
        # Question ids of different dev sets may collide; keep them apart.
        candidates.append(found.set_column(0, "question_id",
                                           pc.binary_join_element_wise(spec.name, found.column("question_id"), "|")))  # fmt: skip
    return pa.concat_tables(candidates), np.concatenate(hits), questions.num_rows


def tune_hybrid_stage(model_key: str) -> str:
    """The ledger name of tuning a model's hybrid alpha (the pipeline checks it is still there)."""
    return f"tune-hybrid:{model_key}"


@flow(name="tune-hybrid")
def tune_hybrid_flow(
    model: str,
    dev: list[str],
    k: AtLeastOne = 20,
    depth: AtLeastOne = 100,
    index_type: IndexType = "flat",
    workspace: str | None = None,
) -> TuneHybridReport:
    """TASER's single alpha: best dev R@k over 0.5..2.0 (step 0.1) on the combined dev sets.

    Args:
        model: Model id, Hugging Face name or folder of the dense side.
        dev: Dev question sets, NAME:SPLIT each (tune on held-out questions, never on test).
        k: Choose alpha by R@k.
        depth: Candidates taken from each side before fusing (TASER's K').
        index_type: flat, hnsw or ivfpq.
        workspace: Workspace directory (default: $ODQA_WORKSPACE, else ./workspace).
    """
    if not dev:
        raise ValueError("give at least one --dev NAME:SPLIT")
    ws = Workspace.resolve(workspace)
    specs = [DatasetSpec.parse(s, with_weight=False) for s in dev]
    # alpha is what is tuned: the searcher opens with any value and is asked for candidates only.
    opened = open_searcher(ws, RetrieverChoice(kind="hybrid", model=model, index_type=index_type, alpha=1.0,
                                               depth=depth), ensure_index=ensure_dense_index)  # fmt: skip
    ref = opened.ref
    stage = tune_hybrid_stage(ref.key)  # type: ignore[union-attr]
    config = {key: value for key, value in opened.config.items() if key != "alpha"}
    questions_fp = [questions_fingerprint(ws, s.dataset, s.split, QUESTION_COLUMNS) for s in specs]
    stage_fp = fingerprint(stage, config, [s.name for s in specs], k, depth, questions_fp)
    layout = IndexLayout.of(ws)
    done = finished_report(ws, stage, stage_fp, TuneHybridReport, "same model, index and dev questions")
    if done is not None and layout.tuned_alpha(ref.key) is not None:  # type: ignore[union-attr]
        opened.searcher.close()
        done.release = publish_alpha(ws, ref.key)  # type: ignore[union-attr]
        return done
    try:
        with flow_run_logs():
            parts = [_dev_candidates(ws, opened.searcher, spec) for spec in specs]  # type: ignore[arg-type]
    finally:
        opened.searcher.close()
    total = sum(count for _, _, count in parts)
    search = tune_alpha(pa.concat_tables([c for c, _, _ in parts]), np.concatenate([h for _, h, _ in parts]), total,
                        k=k)  # fmt: skip
    report = TuneHybridReport(model=model, dev=[s.name for s in specs], k=k, depth=depth, index_type=index_type,
                              alpha=search.best_alpha, dev_recall=round(search.recall[search.best_alpha], 4),
                              dense_only_recall=round(search.dense_only, 4), questions=total)  # fmt: skip
    rows = metric_rows(stage, [(f"R@{k}", recall, f"alpha={alpha:.1f}") for alpha, recall in search.recall.items()],
                       dataset="+".join(s.dataset for s in specs), split="+".join(s.split for s in specs),
                       config={"model": model, "dev": report.dev, "k": k, "depth": depth, "index_type": index_type})  # fmt: skip
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        tx.replace_source("metrics", stage)
        tx.write("metrics", rows, source=stage)
        layout.write_hybrid_settings(ref.key, {**report.ledger(),  # type: ignore[union-attr]
                                               "recall": {f"{a:.1f}": r for a, r in search.recall.items()}})  # fmt: skip
        tx.report = report.ledger()
    report.release = publish_alpha(ws, ref.key)  # type: ignore[union-attr]
    log_report(stage, report)
    return report


def publish_alpha(ws: Workspace, key: str) -> str | None:
    """A running service takes a model's hybrid alpha from the release it serves, so a release
    published before the tuning is published again with the tuned alpha (a no-op when the current
    release has it already). The release serving the model now, or None when none does."""
    current = current_release(ws)
    if current is None or not any(entry.key == key for entry in current.dense):
        return None
    return publish_indexes(ws, current.passages_version).current
