"""`odqa import passages|questions|run`: corpora, question sets and runs in standard formats."""

from __future__ import annotations

from typing import Any

import click

from ...pipelines.tsv_lines import TSV_PASSAGE_FORMATS, TSV_QUESTION_FORMATS, check_quoting
from ...storage.choices import QUESTION_FORMATS
from .groups import NAME_RULE_HELP, ON_DUPLICATE, PASSAGE_FORMATS, checked_name, import_group, workspace_arg
from .report import echo_report

QUOTING_HELP = ("How a tab-separated line is split: csv reads it as DPR's csv.reader does (a field that starts with "
                "a quote is csv-quoted); none splits it at tabs only, quotes being text, for a file not written "
                "with csv quoting.")  # fmt: skip


def _check_quoting(quoting: str, fmt: str, tab_separated: tuple[str, ...]) -> None:
    """Refuse --quoting none for a format without a tab-separated file before any work starts."""
    try:
        check_quoting(quoting, fmt, tab_separated)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _passages_head(params: dict[str, Any]) -> None:
    from ...pipelines.import_heads import check_passages_head

    _check_quoting(params["quoting"], params["fmt"], TSV_PASSAGE_FORMATS)
    check_passages_head(params["fmt"], params["path"], params["max_record_bytes"], params["quoting"])


def _questions_head(params: dict[str, Any]) -> None:
    from ...pipelines.import_heads import check_questions_head

    _check_quoting(params["quoting"], params["fmt"], TSV_QUESTION_FORMATS)
    check_questions_head(params["fmt"], params["path"], params["dataset"], params["split"],
                         params["max_record_bytes"], params["quoting"])  # fmt: skip


def _run_head(params: dict[str, Any]) -> None:
    from ...pipelines.import_heads import check_run_head

    check_run_head(params["path"])


@import_group.command("passages", precheck=_passages_head)
@click.option("--format", "fmt", type=click.Choice(PASSAGE_FORMATS), required=True)
@click.option("--replace", is_flag=True, help="Replace the passages an earlier import of this same file added.")
@click.option("--on-duplicate", type=click.Choice(ON_DUPLICATE), default="refuse", show_default=True,
              help="A passage id another source already holds: refuse the file, or keep the existing row and "
              "skip this file's.")
@click.option("--max-record-bytes", type=click.IntRange(min=1), default=1 << 20, show_default=True,
              help="The longest line accepted; longer ones are refused.")
@click.option("--quoting", type=click.Choice(["csv", "none"]), default="csv", show_default=True,
              help=f"{QUOTING_HELP} dpr-tsv only.")
@click.argument("path", type=click.Path(exists=True))
@click.pass_context
def import_passages(ctx: click.Context, fmt: str, replace: bool, on_duplicate: str, max_record_bytes: int,
                    quoting: str, path: str) -> None:  # fmt: skip
    """Import a passage corpus: DPR's psgs_w100.tsv or a BEIR corpus.jsonl (or its folder).

    Each file is a source of its own (its full path): another file adds passages, ids stay unique
    across the workspace, and the report gives passages added, replaced and kept, with the total.
    """
    from ..stages.passages import import_passages_flow

    report = import_passages_flow(fmt=fmt, path=path, workspace=workspace_arg(ctx), replace=replace,
                                  on_duplicate=on_duplicate, max_record_bytes=max_record_bytes,
                                  quoting=quoting)  # fmt: skip
    echo_report("import passages", report)



@import_group.command("questions", precheck=_questions_head)
@click.option("--format", "fmt", type=click.Choice(list(QUESTION_FORMATS)), required=True)
@click.option("--dataset", required=True, help="Dataset name, e.g. nq, trivia, squad, scifact.")
@click.option("--split", required=True, help="Split name, e.g. train, dev, test.")
@click.option("--replace", is_flag=True,
              help="Replace the questions an earlier import of this same file (path) added.")
@click.option("--on-duplicate", type=click.Choice(ON_DUPLICATE), default="refuse", show_default=True,
              help="A question id (or a passage id with another text) another source already holds: refuse the "
              "file, or keep the existing row and skip this file's.")
@click.option("--max-record-bytes", type=click.IntRange(min=1), default=8 << 20, show_default=True,
              help="The longest record accepted (a line, a JSON array element, a whole SQuAD file).")
@click.option("--quoting", type=click.Choice(["csv", "none"]), default="csv", show_default=True,
              help=f"{QUOTING_HELP} dpr-qas and beir's qrels only.")
@click.argument("path", type=click.Path(exists=True))
@click.pass_context
def import_questions(ctx: click.Context, fmt: str, dataset: str, split: str, replace: bool, on_duplicate: str,
                     max_record_bytes: int, quoting: str, path: str) -> None:  # fmt: skip
    """Import PATH (a file; a folder for beir and entityquestions) into questions (+ passages, qrels).

    Each file is a source of its own (its full path): another file adds questions, ids stay unique
    across the workspace, and the report gives questions added, replaced and kept, with the total.
    """
    from ..stages.questions import import_questions_flow

    report = import_questions_flow(fmt=fmt, path=path, dataset=dataset, split=split, workspace=workspace_arg(ctx),
                                   replace=replace, on_duplicate=on_duplicate,
                                   max_record_bytes=max_record_bytes, quoting=quoting)  # fmt: skip
    echo_report("import questions", report)


@import_group.command("run", precheck=_run_head)
@click.option("--format", "fmt", type=click.Choice(["trec"]), default="trec", show_default=True)
@click.option("--run", "run", required=True, callback=checked_name,
              help=f"Name to store the run under. {NAME_RULE_HELP}")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.pass_context
def import_run(ctx: click.Context, fmt: str, run: str, path: str) -> None:
    """Import a run file (`qid Q0 docid rank score tag`); ranks are re-derived from scores."""
    from ..stages.import_run import import_run_flow

    echo_report("import run", import_run_flow(path=path, run=run, fmt=fmt, workspace=workspace_arg(ctx)))

