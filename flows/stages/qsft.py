"""`odqa qsft`: query-side fine-tuning against a fixed index (thesis 5.2).

Fine-tune MODEL's question side on TRAIN questions against its index for the current passages,
and register the result as MODEL_ID. Its passage side stays MODEL's (`qsft.json` names it): the
same embeddings and index serve both. Answer matching needs passage texts, so the passages' text
column is held in memory.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from prefect import flow

from ...models.retriever import load_retriever
from ...models.searchers import RetrieverChoice, open_searcher
from ...models.searchers.dense import dense_build
from ...pipelines.dense.qsft import QsftConfig, query_side_finetune
from ...pipelines.dense.sharded_encoding import EncodedCorpus
from ...pipelines.evaluation.answers import match_mode
from ...pipelines.questions.specs import DatasetSpec
from ...storage import Workspace
from ...storage.choices import IndexType
from ...storage.fingerprint import fingerprint
from ...storage.ids import check_model_id
from ...storage.model_registry import (
    ModelRef,
    model_is_registered,
    register_model,
    write_qsft_marker,
)
from ...storage.passages import all_passage_texts
from ...storage.questions import load_questions, questions_fingerprint
from ...storage.reports import Report
from ..plumbing.report_text import log_report
from ..plumbing.runtime import flow_run_logs
from ..plumbing.skip_unchanged import finished_report
from .index import ensure_dense_index


@dataclass
class QsftReport(Report):
    model_id: str
    source_model: str
    train: list[str]
    questions: int
    steps: int
    epoch_losses: list[float]
    answerable_at_k: list[float]
    skipped_without_positive: int


@flow(name="qsft")
def qsft_flow(
    model: str,
    train: list[str],
    model_id: str,
    index_type: IndexType = "flat",
    epochs: int = 2,
    batch_size: int = 24,
    lr: float = 2e-5,
    warmup_steps: int = 100,
    top_k: int = 100,
    seed: int = 0,
    workspace: str | None = None,
) -> QsftReport:
    """Thesis 5.2: fine-tune MODEL's question side against its fixed index on TRAIN questions
    (NAME:SPLIT each) and register the result as MODEL_ID (see the module doc)."""
    ws = Workspace.resolve(workspace)
    check_model_id(model_id)
    specs = [DatasetSpec.parse(s, with_weight=False) for s in train]
    opened = open_searcher(ws, RetrieverChoice(kind="dense", model=model, index_type=index_type),
                           ensure_index=ensure_dense_index)  # fmt: skip
    ref: ModelRef = opened.ref  # type: ignore[assignment]
    index = opened.searcher.index  # type: ignore[attr-defined]
    corpus = opened.searcher.passages_version  # the embeddings and texts of the index's passages
    params = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "warmup_steps": warmup_steps, "top_k": top_k,
              "seed": seed}  # fmt: skip
    stage = f"qsft-{model_id}"
    questions_fp = [questions_fingerprint(ws, s.dataset, s.split, ["question_id", "question", "answers"]) for s in specs]
    stage_fp = fingerprint(stage, opened.config["question_model_fingerprint"], index.meta.to_json(), index_type,
                           [s.name for s in specs], params, questions_fp)  # fmt: skip
    done = finished_report(ws, stage, stage_fp, QsftReport, "same model, index, questions and parameters")
    if done is not None and model_is_registered(ws, model_id):
        return done
    questions, answers = [], []
    for spec in specs:
        table = load_questions(ws, spec.dataset, spec.split, ["question", "answers"])
        questions += table.column("question").to_pylist()
        answers += [a or [] for a in table.column("answers").to_pylist()]
    trainee = load_retriever(ref.path)  # its own copy: the loaded model above is shared and stays as it is
    with flow_run_logs():
        result = query_side_finetune(
            trainee, index, EncodedCorpus(dense_build(ws, ref, corpus).embeddings).vectors, questions, answers,
            all_passage_texts(ws, corpus),
            QsftConfig(epochs=epochs, batch_size=batch_size, learning_rate=lr, warmup_steps=warmup_steps, top_k=top_k,
                       seed=seed, match_mode=match_mode(specs[0].dataset)),
        )  # fmt: skip
    report = QsftReport(model_id=model_id, source_model=model, train=[s.name for s in specs], questions=len(questions),
                        steps=result.steps, epoch_losses=[round(x, 4) for x in result.epoch_losses],
                        answerable_at_k=[round(x, 4) for x in result.answerable],
                        skipped_without_positive=result.skipped_without_positive)  # fmt: skip
    with tempfile.TemporaryDirectory(dir=ws.tmp_dir) as scratch:
        written = trainee.save_pretrained(Path(scratch) / model_id)
        write_qsft_marker(written, ref.passage_name, {"index_type": index_type, **params})
        row = {"arch": trainee.arch, "parameters": trainee.parameter_count(), "base": model,
               "trained_on": ",".join(train), "config": json.dumps({"qsft": params, **report.ledger()})}  # fmt: skip
        register_model(ws, model_id, written, row, stage=stage, stage_fingerprint=stage_fp, move=True,
                       report=report.ledger())
    log_report(stage, report)
    return report
