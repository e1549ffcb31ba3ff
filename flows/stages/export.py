"""`odqa export model` and `odqa export beir`: models and data in the formats other tools read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefect import flow

from ...models.export_st import export_sentence_transformers
from ...models.retriever import load_retriever
from ...pipelines.beir_export import write_beir_corpus, write_beir_qrels, write_beir_queries
from ...storage import Workspace
from ...storage.model_registry import resolve_model
from ...storage.passages import PASSAGE_COLUMNS
from ...storage.questions import load_questions
from ...storage.reports import Report

MODEL_FORMATS = ("sentence-transformers",)


@dataclass
class ExportModelReport(Report):
    path: str
    layout: str
    hf_folders: dict[str, str]


@flow(name="export-model")
def export_model_flow(model: str, out: str, fmt: str = "sentence-transformers",
                      workspace: str | None = None) -> ExportModelReport:  # fmt: skip
    """Write a workspace model (id, folder or hub name) as a sentence-transformers folder."""
    if fmt not in MODEL_FORMATS:
        raise ValueError(f"unknown model export format {fmt!r}; expected one of {MODEL_FORMATS}")
    ws = Workspace.resolve(workspace)
    ref = resolve_model(ws, model)
    exported = export_sentence_transformers(load_retriever(ref.path), Path(out).expanduser(), model)
    return ExportModelReport(path=exported.path, layout=exported.layout, hf_folders=exported.hf_folders)


@dataclass
class ExportBeirReport(Report):
    path: str
    passages: int
    queries: int
    qrels: int
    judged_queries: int


@flow(name="export-beir")
def export_beir_flow(dataset: str, split: str, out: str, workspace: str | None = None) -> ExportBeirReport:
    """Write the passages and one dataset split's questions and judgments in BEIR's layout."""
    ws = Workspace.resolve(workspace)
    questions = load_questions(ws, dataset, split, ["question_id", "question", "answers", "positive_ids"])
    root = Path(out).expanduser().resolve()
    queries = write_beir_queries(questions, root / "queries.jsonl")
    qrels, judged = write_beir_qrels(questions, root / "qrels" / f"{split}.tsv")
    passages = write_beir_corpus(ws.scan("passages", columns=PASSAGE_COLUMNS), root / "corpus.jsonl")
    return ExportBeirReport(path=str(root), passages=passages, queries=queries, qrels=qrels, judged_queries=judged)
