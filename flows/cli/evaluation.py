"""`odqa evaluate` and `odqa compare`: metrics tables, significance tests, R@K plots."""

from __future__ import annotations

import click

from flows.cli.groups import main, workspace_arg, workspace_of

MATCH_HELP = "Answer matching: DPR's token match (string), regex (CuratedTREC), or auto by dataset name."


def _ks(value: str) -> list[int]:
    from pipelines.evaluation.metrics import parse_ks

    try:
        return list(parse_ks(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@main.command("evaluate")
@click.option(
    "--run", "run", required=True, help='Run to evaluate (see: odqa sql "SELECT DISTINCT run FROM runs").'
)
@click.option("--k", "ks", default="1,5,20,100", show_default=True, help="Cut-offs for R@K, comma-separated.")
@click.option("--match", type=click.Choice(["auto", "string", "regex"]), default="auto", show_default=True,
              help=MATCH_HELP)  # fmt: skip
@click.option("--groups", is_flag=True, help="Also print the per-relation rows.")
@click.pass_context
def evaluate(ctx: click.Context, run: str, ks: str, match: str, groups: bool) -> None:
    """Evaluate RUN into the metrics table and print its figures (and a plot path)."""
    from flows.cli.sql import render
    from flows.evaluation import evaluate_flow

    report = evaluate_flow(run=run, ks=_ks(ks), match=match, workspace=workspace_arg(ctx))
    status = "no-op (inputs unchanged)" if report.get("noop") else "done"
    click.echo(f"evaluate {run}: {status}")
    where = "" if groups else " AND \"group\" = ''"
    quoted = run.replace("'", "''")
    table = workspace_of(ctx).sql(
        'SELECT dataset, split, "group", metric, round(value, 4) AS value FROM metrics '
        f"WHERE run = '{quoted}'{where} ORDER BY dataset, split, \"group\", metric"
    )
    click.echo(render(table, "table"))
    for split in report.get("splits", []):
        click.echo(f"  {split}")
    if report.get("plot"):
        click.echo(f"plot: {report['plot']}")


@main.command("compare")
@click.argument("runs", nargs=-1, required=True)
@click.option("--k", "ks", default="1,5,20,100", show_default=True, help="Cut-offs for R@K, comma-separated.")
@click.option("--match", type=click.Choice(["auto", "string", "regex"]), default="auto", show_default=True,
              help=MATCH_HELP)  # fmt: skip
@click.option(
    "--alpha", type=float, default=0.05, show_default=True, help="Significance level after correction."
)
@click.pass_context
def compare(ctx: click.Context, runs: tuple[str, ...], ks: str, match: str, alpha: float) -> None:
    """Compare RUNS: means per metric, two-sided paired t-tests with Bonferroni correction."""
    import pyarrow as pa

    from flows.cli.sql import render
    from flows.evaluation import compare_flow

    report = compare_flow(runs=list(runs), ks=_ks(ks), match=match, alpha=alpha, workspace=workspace_arg(ctx))
    wide: dict[tuple[str, str, str], dict[str, object]] = {}
    for m in report["means"]:
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
        for c in report["comparisons"]
    ]  # fmt: skip
    click.echo(render(pa.Table.from_pylist(tests), "table"))
    if report.get("plot"):
        click.echo(f"plot: {report['plot']}")
