"""`odqa search`: the top passages of free-text questions, printed as each question comes.

Questions come from the arguments, else from stdin: on a terminal a prompt answers each line as
it is typed; piped, each line is answered (and flushed) before the next is read, so a program can
talk to it. The searcher is opened once for all of them (`flows.stages.search.SearchSession`), and no
Prefect flow runs: searching writes nothing to track.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click

from .groups import INDEX_TYPES, MODEL_HELP, RETRIEVER_CHOICES, main, passages_per_question
from .numbers import FiniteRange

PROMPT = "question> "
TEXT_WIDTH = 240


def stdin_questions() -> Iterator[str]:
    """Non-empty lines of stdin, each yielded as soon as it is read; a prompt on a terminal."""
    interactive = sys.stdin.isatty()
    if interactive:
        click.echo("odqa search: type a question and press Enter (Ctrl-D to quit)", err=True)
    while True:
        if interactive:
            click.echo(PROMPT, nl=False, err=True)
        line = sys.stdin.readline()
        if not line:
            return
        if line.strip():
            yield line.strip()


def echo_hits(question: str, hits: list) -> None:
    """One question's hits: rank, score, title, passage id, and the text's first characters."""
    lines = [f"\n? {question}"]
    for hit in hits:
        text = (hit.text or "").replace("\n", " ")
        lines.append(f"{hit.rank:>3}. [{hit.score:.3f}] {hit.title} ({hit.passage_id})")
        lines.append(f"     {text[:TEXT_WIDTH]}{'...' if len(text) > TEXT_WIDTH else ''}")
    if not hits:
        lines.append("     (no passage matches)")
    click.echo("\n".join(lines))
    sys.stdout.flush()


@main.command("search")
@click.argument("questions", nargs=-1)
@click.option("--retriever", type=click.Choice(RETRIEVER_CHOICES), default=None,
              help="Default: dense when --model is given, else bm25.")  # fmt: skip
@click.option("--model", default=None, help=MODEL_HELP)
@click.option("--k", type=int, default=5, show_default=True, callback=passages_per_question,
              help="Passages per question (at most $ODQA_MAX_K, default 10,000).")  # fmt: skip
@click.option("--alpha", type=FiniteRange(min=0), default=None, help="Hybrid weight (default: the tuned one).")
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True)
@click.pass_context
def search(ctx: click.Context, questions: tuple[str, ...], retriever: str | None, model: str | None, k: int,
           alpha: float | None, index_type: str) -> None:  # fmt: skip
    """Print the top passages (title, score, text) for each QUESTION, else for each line of stdin
    (a prompt on a terminal), answering each as it comes. Builds nothing: a missing index is an
    error naming the command that builds it."""
    from ..stages.search import SearchSession

    chosen = retriever or ("dense" if model else "bm25")
    answered = 0
    with SearchSession(ctx.find_root().obj.get("workspace"), chosen, model, alpha, index_type) as session:
        if session.alpha is not None:
            click.echo(f"odqa search: hybrid alpha {session.alpha:g}", err=True)
        for question in questions or stdin_questions():
            echo_hits(question, session.ask([question], k))
            answered += 1
    if not answered:
        raise click.UsageError("give a question (or pipe questions on stdin, one per line)")
