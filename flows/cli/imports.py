"""`odqa import passages|questions|run`: corpora, question sets and runs in standard formats."""

from __future__ import annotations

import click

from ...storage.choices import QUESTION_FORMATS
from .groups import NAME_RULE_HELP, ON_DUPLICATE, PASSAGE_FORMATS, checked_name, import_group, workspace_arg
from .report import echo_report


@import_group.command("passages")
@click.option("--format", "fmt", type=click.Choice(PASSAGE_FORMATS), required=True)
@click.option("--replace", is_flag=True, help="Replace the passages an earlier import of this same file added.")
@click.option("--on-duplicate", type=click.Choice(ON_DUPLICATE), default="refuse", show_default=True,
              help="A passage id another source already holds: refuse the file, or keep the existing row and "
              "skip this file's.")
@click.option("--max-record-bytes", type=click.IntRange(min=1), default=1 << 20, show_default=True,
              help="The longest line accepted; longer ones are refused.")
@click.argument("path", type=click.Path(exists=True))
@click.pass_context
def import_passages(ctx: click.Context, fmt: str, replace: bool, on_duplicate: str, max_record_bytes: int,
                    path: str) -> None:  # fmt: skip
    """Import a passage corpus: DPR's psgs_w100.tsv or a BEIR corpus.jsonl (or its folder).

    Each file is a source of its own (its full path): another file adds passages, ids stay unique
    across the workspace, and the report gives passages added, replaced and kept, with the total.
    """
    from ..stages.passages import import_passages_flow

    report = import_passages_flow(fmt=fmt, path=path, workspace=workspace_arg(ctx), replace=replace,
                                  on_duplicate=on_duplicate, max_record_bytes=max_record_bytes)  # fmt: skip
    echo_report("import passages", report)



@import_group.command("questions")
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
@click.argument("path", type=click.Path(exists=True))
@click.pass_context
def import_questions(ctx: click.Context, fmt: str, dataset: str, split: str, replace: bool, on_duplicate: str,
                     max_record_bytes: int, path: str) -> None:  # fmt: skip
    """Import PATH (a file; a folder for beir and entityquestions) into questions (+ passages, qrels).

    Each file is a source of its own (its full path): another file adds questions, ids stay unique
    across the workspace, and the report gives questions added, replaced and kept, with the total.
    """
    from ..stages.questions import import_questions_flow

    report = import_questions_flow(fmt=fmt, path=path, dataset=dataset, split=split, workspace=workspace_arg(ctx),
                                   replace=replace, on_duplicate=on_duplicate,
                                   max_record_bytes=max_record_bytes)  # fmt: skip
    echo_report("import questions", report)


@import_group.command("run")
@click.option("--format", "fmt", type=click.Choice(["trec"]), default="trec", show_default=True)
@click.option("--run", "run", required=True, callback=checked_name,
              help=f"Name to store the run under. {NAME_RULE_HELP}")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.pass_context
def import_run(ctx: click.Context, fmt: str, run: str, path: str) -> None:
    """Import a run file (`qid Q0 docid rank score tag`); ranks are re-derived from scores."""
    from ..stages.import_run import import_run_flow

    echo_report("import run", import_run_flow(path=path, run=run, fmt=fmt, workspace=workspace_arg(ctx)))

