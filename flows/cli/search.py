"""`odqa search`: the top passages of free-text questions, printed."""

from __future__ import annotations

import click

from flows.cli.groups import INDEX_TYPES, MODEL_HELP, main, prefect_api_of, workspace_arg


@main.command("search")
@click.argument("questions", nargs=-1)
@click.option("--retriever", type=click.Choice(["bm25", "dense", "hybrid"]), default=None,
              help="Default: dense when --model is given, else bm25.")  # fmt: skip
@click.option("--model", default=None, help=MODEL_HELP)
@click.option("--k", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--alpha", type=float, default=None, help="Hybrid weight (default: the tuned one).")
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default="flat", show_default=True)
@click.pass_context
def search(ctx: click.Context, questions: tuple[str, ...], retriever: str | None, model: str | None, k: int,
           alpha: float | None, index_type: str) -> None:  # fmt: skip
    """Print the top passages (title, score, text) for each QUESTION (or each line of stdin).

    With a Prefect server configured the search is a flow run on it; without one it is answered
    directly, without starting a temporary server (searching writes nothing to track)."""
    from flows.search import search_flow

    asked = list(questions) or [line.strip() for line in click.get_text_stream("stdin") if line.strip()]
    if not asked:
        raise click.UsageError("give a question (or pipe questions on stdin, one per line)")
    run = search_flow if prefect_api_of(ctx).url else search_flow.fn
    results = run(questions=asked, retriever=retriever or ("dense" if model else "bm25"), model=model, k=k,
                  alpha=alpha, index_type=index_type, workspace=workspace_arg(ctx))  # fmt: skip
    current = None
    for hit in results:
        if hit.question != current:
            current = hit.question
            click.echo(f"\n? {current}")
        text = (hit.text or "").replace("\n", " ")
        click.echo(f"{hit.rank:>3}. [{hit.score:.3f}] {hit.title} ({hit.passage_id})")
        click.echo(f"     {text[:240]}{'...' if len(text) > 240 else ''}")

