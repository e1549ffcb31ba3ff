"""`odqa reproduce`: a paper's setup from an empty workspace to its table, side by side with the
paper's figures (flow in flows/compositions/reproduce.py, setups in storage/paper_setups/)."""

from __future__ import annotations

import click

from ...storage.choices import SetupName
from .groups import VerbCommand, main, workspace_arg
from .recipe import echo_scores

SETUPS: tuple[str, ...] = SetupName.__args__


class ListOrReproduce(VerbCommand):
    """`--list` only reads the setup files: it answers before any workspace is made or server started."""

    def invoke(self, ctx: click.Context):
        if ctx.params.get("listing"):
            return click.Command.invoke(self, ctx)
        if not ctx.params.get("setup"):
            raise click.UsageError("name a SETUP (odqa reproduce --list shows them)")
        return super().invoke(ctx)


def _list() -> None:
    from ...storage.setups import load_setup

    for name in SETUPS:
        setup = load_setup(name)
        click.echo(f"{setup.name}\n  paper: {setup.paper}\n  {setup.title}\n  hardware: {setup.hardware}\n"
                   f"  projected: about {setup.projected.hours:g} h (docs/reproducing-papers.md says how)")  # fmt: skip


@main.command("reproduce", cls=ListOrReproduce)
@click.argument("setup", required=False, type=click.Choice(SETUPS))
@click.option("--list", "listing", is_flag=True, help="The setups: paper, hardware, projected time.")
@click.option("--registry", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A resource registry of your own (odqa fetch's schema); its names replace the shipped ones.")
@click.option("--mirror", default=None, metavar="BASE", help="Fetch every https://HOST/PATH from BASE/HOST/PATH.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None,
              help="Cap every training at N steps instead of the paper's epochs (a smoke run: one round, no "
                   "hybrids, only the architectures the figures name).")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Train and evaluate on the first N questions of each set (a smoke run, as --max-steps).")
@click.option("--base", default=None, help="Start from this checkpoint instead of the setup's (e.g. a local copy).")
@click.pass_context
def reproduce(ctx: click.Context, setup: str, listing: bool, registry: str | None, mirror: str | None,
              max_steps: int | None, limit: int | None, base: str | None) -> None:  # fmt: skip
    """Fetch, import, train in the paper's rounds, index, evaluate, and print the paper's figures
    beside the run's, with the difference (stored in the `reproduction` table). Resumable: the
    same command after a kill goes on where it stopped."""
    if listing:
        _list()
        return
    from ...storage.reproduction import reproduce_stage
    from ..compositions.reproduce import SMOKE, reproduce_flow

    report = reproduce_flow(setup=setup, registry=registry, mirror=mirror, max_steps=max_steps, limit=limit,
                            base=base, workspace=workspace_arg(ctx))  # fmt: skip
    scale = f" (smoke-sized run: --max-steps/--limit, {SMOKE}; not the paper's scale)" if report.limited else ""
    click.echo(f"reproduce {report.setup}: {report.title}{scale}")
    if report.recognised:
        click.echo("done before (recognised from the workspace): the same request, nothing committed since")
    echo_scores(report.table())
    click.echo(f"in SQL: odqa sql \"SELECT * FROM reproduction WHERE setup = '{report.setup}'\""
               f"  (stage {reproduce_stage(report.setup)})")  # fmt: skip
