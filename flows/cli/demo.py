"""`odqa demo`: the pipeline on the bundled sample, then its results table and three SQL queries
over labels and results."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import click

from .groups import main, workspace_arg

if TYPE_CHECKING:  # imported when the verb runs: the pipeline imports every stage and Prefect
    from ..compositions.pipeline import EvaluationSettings, PipelineReport, QuestionSettings, TrainingSettings

RUN_LABELS = {"bm25": "BM25", "zero-shot": "dense zero-shot (MiniLM)", "dpr": "DPR-style bi-encoder",
              "taser": "TASER", "desire-me": "DESIRE-ME", "hybrid": "hybrid (DPR + BM25)"}  # fmt: skip


@main.command("demo")
@click.pass_context
def demo(ctx: click.Context) -> None:
    """Run the pipeline on the bundled sample into the workspace and show the results."""
    # Every stage prints its own line with its time; progress of a long one every 2 minutes.
    ctx.find_root().obj["terminal"].terminal.stage_lines(gap=120.0)
    run_demo(workspace_arg(ctx))


def run_demo(
    workspace: str | None,
    training: TrainingSettings | None = None,
    questions: QuestionSettings | None = None,
    evaluation: EvaluationSettings | None = None,
) -> PipelineReport:
    """The demo flow, then the results table (R@1/5/20/100 of BM25, dense zero-shot, DPR, TASER,
    DESIRE-ME, hybrid) and the demo's SQL queries, as the terminal shows them; returns the
    pipeline's report (for callers that go on with it, as the pipeline test does)."""
    import pyarrow as pa

    from ...storage import Workspace
    from ...storage.demo_queries import DEMO_QUERIES
    from ..compositions.demo import DEMO_TRAINING, demo_flow
    from .sql import render

    ws = Workspace.resolve(workspace)
    click.echo(f"=== odqa pipeline on the bundled sample -> {ws.root} ===")
    outcome = demo_flow(workspace=str(ws.root), training=training or DEMO_TRAINING, questions=questions,
                        evaluation=evaluation)  # fmt: skip
    cached = sum(1 for state in outcome.states.values() if state == "Cached")
    click.echo(f"\n{len(outcome.states)} stages in {outcome.seconds:.0f}s ({cached} from cache)")
    rows = []
    for row in outcome.results:
        label = row["run"].rsplit(f"-{row['dataset']}-{row['split']}", 1)[0]
        rows.append({"retriever": RUN_LABELS.get(label, label), "questions": f"{row['dataset']}/{row['split']}",
                     **{k: row[k] for k in row if k.startswith("R@")}})  # fmt: skip
    click.echo("\n=== Top-K retrieval accuracy (answer in the top K passages) ===")
    click.echo(render(pa.Table.from_pylist(rows), "table"))
    for title, query in DEMO_QUERIES:
        click.echo(f"\n=== SQL: {title} ===")
        click.echo(f"$ odqa sql {shlex.quote(query)}")
        click.echo(render(ws.sql(query), "table"))
    return outcome
