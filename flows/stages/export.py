"""`odqa export model` and `odqa export beir`: models and data in the formats other tools read.

Each writes a complete folder beside `out` and swaps it in (`storage.write_targets`): `out` must
be new or empty, or, with `force`, an earlier export of the same kind; never the workspace, a
folder above it or one of its own folders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prefect import flow

from ...models.export_st import export_sentence_transformers
from ...models.retriever import load_retriever
from ...pipelines.beir_export import write_beir_corpus, write_beir_qrels, write_beir_queries
from ...storage import Workspace
from ...storage.model_registry import public_model_name, resolve_model
from ...storage.passages import PASSAGE_COLUMNS
from ...storage.questions import load_questions
from ...storage.reports import Report
from ...storage.write_targets import check_folder_target, export_folder
from ..plumbing.runtime import stage_logger
from .evaluate import split_judgments

MODEL_FORMATS = ("sentence-transformers",)
MODEL_EXPORT = "sentence-transformers model"
BEIR_EXPORT = "BEIR dataset"


@dataclass
class ExportModelReport(Report):
    path: str
    layout: str
    hf_folders: dict[str, str]
    added_weights: list[str]
    added_from: str | None


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
    about = {"model": public_model_name(model).label}  # the folder may be shared: no local path in it
    with export_folder(target, ws.root, option="--out", kind=MODEL_EXPORT, force=force, about=about) as folder:
        exported = export_sentence_transformers(retriever, folder, model)
    return ExportModelReport(path=str(target), layout=exported.layout, hf_folders=exported.hf_folders,
                             added_weights=exported.added_weights, added_from=exported.added_from)  # fmt: skip


@dataclass
class ExportBeirReport(Report):
    path: str
    passages: int
    queries: int
    qrels: int
    judged_queries: int
    qrels_source: str
    warning: str | None = None  # shown on its own line (stderr), not as a figure
    hidden: ClassVar[tuple[str, ...]] = ("warning",)


def _unjudged(dataset: str, split: str, questions: int) -> str:
    return (f"{dataset}/{split}: none of its {questions:,} questions has a judged passage (no qrels rows, "
            "no positive_ids)")  # fmt: skip


def no_judgments_error(dataset: str, split: str, questions: int) -> str:
    """Why a split without judgments is refused, and how to get them."""
    return (f"{_unjudged(dataset, split, questions)}, so qrels/{split}.tsv would hold only its header and "
            "BEIR's GenericDataLoader, which keeps only judged queries, would load none. Question files with "
            "answers only (dpr-qas, nq-open) carry no judgments: import the split from a file with positive "
            "passages (dpr-json positive_ctxs, squad, beir qrels), or pass --allow-empty-qrels to export its "
            "corpus and queries with an empty qrels file")  # fmt: skip


@flow(name="export-beir")
def export_beir_flow(dataset: str, split: str, out: str, force: bool = False, allow_empty_qrels: bool = False,
                     workspace: str | None = None) -> ExportBeirReport:  # fmt: skip
    """Write the passages and one dataset split's questions and judgments in BEIR's layout.

    Args:
        dataset: Dataset whose questions are exported.
        split: Split of the dataset, e.g. test.
        out: Folder to write: new or empty, or an earlier BEIR export (with force).
        force: Replace `out` when it holds an earlier odqa BEIR export.
        allow_empty_qrels: Export a split none of whose questions is judged (an empty qrels file,
            with a warning) instead of refusing it.
        workspace: Workspace directory (default: $ODQA_WORKSPACE, else ./workspace).
    """
    ws = Workspace.resolve(workspace)
    target = check_folder_target(out, ws.root, option="--out", kind=BEIR_EXPORT, force=force)
    questions = load_questions(ws, dataset, split, ["question_id", "question", "answers", "positive_ids"])
    question_ids = questions.column("question_id").to_pylist()
    judgments, source = split_judgments(ws, dataset, split, questions)
    warning = None
    if not any(judgments.get(qid) for qid in question_ids):
        if not allow_empty_qrels:
            raise ValueError(no_judgments_error(dataset, split, len(question_ids)))
        warning = (f"{_unjudged(dataset, split, len(question_ids))}: qrels/{split}.tsv holds only its header "
                   "(--allow-empty-qrels), and BEIR's GenericDataLoader will load no queries from it")  # fmt: skip
        stage_logger().warning("%s", warning)
    about = {"dataset": dataset, "split": split}
    with export_folder(target, ws.root, option="--out", kind=BEIR_EXPORT, force=force, about=about) as folder:
        queries = write_beir_queries(questions, folder / "queries.jsonl")
        qrels, judged = write_beir_qrels(judgments, question_ids, folder / "qrels" / f"{split}.tsv")
        passages = write_beir_corpus(ws.scan("passages", columns=PASSAGE_COLUMNS), folder / "corpus.jsonl")
    return ExportBeirReport(path=str(target), passages=passages, queries=queries, qrels=qrels, judged_queries=judged,
                            qrels_source=source, warning=warning)  # fmt: skip
