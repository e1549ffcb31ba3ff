"""`odqa compare`: runs side by side with paired t-tests (Bonferroni-corrected)."""

from __future__ import annotations

import click

from .groups import (
    MATCH_CHOICES,
    MATCH_HELP,
    RUN_PASSAGES,
    RUN_PASSAGES_HELP,
    SIGNIFICANCE,
    main,
    parse_cutoffs,
    workspace_arg,
)


@main.command("compare")
@click.argument("runs", nargs=-1, required=True)
@click.option("--k", "ks", default="1,5,20,100", show_default=True, help="Cut-offs for R@K, comma-separated.")
@click.option("--match", type=click.Choice(MATCH_CHOICES), default="auto", show_default=True,
              help=MATCH_HELP)  # fmt: skip
@click.option(
    "--alpha", type=SIGNIFICANCE, default=0.05, show_default=True, help="Significance level after correction."
)
@click.option("--passages", type=click.Choice(RUN_PASSAGES), default="run", show_default=True, help=RUN_PASSAGES_HELP)
@click.pass_context
def compare(ctx: click.Context, runs: tuple[str, ...], ks: str, match: str, alpha: float, passages: str) -> None:
    """Compare RUNS: means per metric, two-sided paired t-tests with Bonferroni correction."""
    import pyarrow as pa

    from ..compositions.compare import compare_flow
    from .sql import render

    report = compare_flow(runs=list(runs), ks=parse_cutoffs(ks), match=match, alpha=alpha, passages=passages,
                          workspace=workspace_arg(ctx))  # fmt: skip
    wide: dict[tuple[str, str, str], dict[str, object]] = {}
    for m in report.means:
        key = (m["dataset"], m["split"], m["metric"])
        row = wide.setdefault(key, {"dataset": key[0], "split": key[1], "metric": key[2]})
        row[m["run"]] = round(m["value"], 4)
    click.echo("means:")
    click.echo(render(pa.Table.from_pylist(list(wide.values())), "table"))
    click.echo(f"\npaired two-sided t-tests, Bonferroni-corrected, significant when p < {alpha}:")
    tests = [
        {"dataset": c["dataset"], "split": c["split"], "metric": c["metric"], "runs": f"{c['run_a']} vs {c['run_b']}",
         "diff": round(c["mean_a"] - c["mean_b"], 4), "p": c["p_value"], "p_bonf": c["p_bonferroni"],
         "sig": "*" if c["significant"] else ""}
        for c in report.comparisons
    ]  # fmt: skip
    click.echo(render(pa.Table.from_pylist(tests), "table"))
    if report.plot:
        click.echo(f"plot: {report.plot}")
