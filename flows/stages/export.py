"""`odqa export model` and `odqa export beir`: models and data in the formats other tools read.

Each writes a complete folder beside `out` and swaps it in (`storage.write_targets`): `out` must
be new or empty, or, with `force`, an earlier export of the same kind; never the workspace, a
folder above it or one of its own folders.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect import flow

from ...models.export_st import export_sentence_transformers
from ...models.retriever import load_retriever
from ...pipelines.beir_export import write_beir_corpus, write_beir_qrels, write_beir_queries
from ...storage import Workspace
from ...storage.model_registry import resolve_model
from ...storage.passages import PASSAGE_COLUMNS
from ...storage.questions import load_questions
from ...storage.reports import Report
from ...storage.write_targets import check_folder_target, export_folder

MODEL_FORMATS = ("sentence-transformers",)
MODEL_EXPORT = "sentence-transformers model"
BEIR_EXPORT = "BEIR dataset"


@dataclass
class ExportModelReport(Report):
    path: str
    layout: str
    hf_folders: dict[str, str]


@flow(name="export-model")
def export_model_flow(model: str, out: str, fmt: str = "sentence-transformers", force: bool = False,
                      workspace: str | None = None) -> ExportModelReport:  # fmt: skip
    """Write a workspace model (id, folder or hub name) as a sentence-transformers folder.

    Args:
        model: Model id of the models table, or a Hugging Face name / model folder.
        out: Folder to write: new or empty, or an earlier export of a model (with force).
        fmt: sentence-transformers.
        force: Replace `out` when it holds an earlier odqa model export.
        workspace: Workspace directory (default: $ODQA_WORKSPACE, else ./workspace).
    """
    if fmt not in MODEL_FORMATS:
        raise ValueError(f"unknown model export format {fmt!r}; expected one of {MODEL_FORMATS}")
    ws = Workspace.resolve(workspace)
    target = check_folder_target(out, ws.root, option="--out", kind=MODEL_EXPORT, force=force)  # before the work
    retriever = load_retriever(resolve_model(ws, model).path)
    with export_folder(target, ws.root, option="--out", kind=MODEL_EXPORT, force=force, about={"model": model}) as folder:
        exported = export_sentence_transformers(retriever, folder, model)
    return ExportModelReport(path=str(target), layout=exported.layout, hf_folders=exported.hf_folders)


@dataclass
class ExportBeirReport(Report):
    path: str
    passages: int
    queries: int
    qrels: int
    judged_queries: int


@flow(name="export-beir")
def export_beir_flow(dataset: str, split: str, out: str, force: bool = False,
                     workspace: str | None = None) -> ExportBeirReport:  # fmt: skip
    """Write the passages and one dataset split's questions and judgments in BEIR's layout.

    Args:
        dataset: Dataset whose questions are exported.
        split: Split of the dataset, e.g. test.
        out: Folder to write: new or empty, or an earlier BEIR export (with force).
        force: Replace `out` when it holds an earlier odqa BEIR export.
        workspace: Workspace directory (default: $ODQA_WORKSPACE, else ./workspace).
    """
    ws = Workspace.resolve(workspace)
    target = check_folder_target(out, ws.root, option="--out", kind=BEIR_EXPORT, force=force)
    questions = load_questions(ws, dataset, split, ["question_id", "question", "answers", "positive_ids"])
    about = {"dataset": dataset, "split": split}
    with export_folder(target, ws.root, option="--out", kind=BEIR_EXPORT, force=force, about=about) as folder:
        queries = write_beir_queries(questions, folder / "queries.jsonl")
        qrels, judged = write_beir_qrels(questions, folder / "qrels" / f"{split}.tsv")
        passages = write_beir_corpus(ws.scan("passages", columns=PASSAGE_COLUMNS), folder / "corpus.jsonl")
    return ExportBeirReport(path=str(target), passages=passages, queries=queries, qrels=qrels, judged_queries=judged)
