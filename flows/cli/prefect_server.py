"""`odqa server status|stop|reset` and `odqa deployments`: the workspace's long-lived Prefect
server (`flows.backend.local_server`) as the command line sees it."""

from __future__ import annotations

import click

from .groups import main, prefect_api_of
from .terminal import workspace_root


@main.group("server")
def server_group() -> None:
    """The workspace's Prefect server: odqa verbs start it in the background on first use;
    `odqa server stop` (or `./run server stop`) stops it."""


def _workspace(ctx: click.Context):
    return workspace_root(ctx.find_root().obj.get("workspace"))


@server_group.command("status")
@click.pass_context
def server_status(ctx: click.Context) -> None:
    """Where the workspace's server runs (UI, API, pid), its database and its log."""
    from ..plumbing.server import status_lines

    click.echo("\n".join(status_lines(_workspace(ctx))))


@server_group.command("list")
def server_list() -> None:
    """Every Prefect server odqa runs on this machine: pid, port, memory, workspace."""
    from ..plumbing.server import list_lines

    click.echo("\n".join(list_lines()))


@server_group.command("stop")
@click.pass_context
def server_stop(ctx: click.Context) -> None:
    """Stop the workspace's server, and a `./run server` with its worker running for it (the
    next verb that runs a flow starts the server again)."""
    from ..backend.local_server import stop_server

    stopped = stop_server(_workspace(ctx))
    click.echo(f"stopped the Prefect server (pid {stopped.pid})" if stopped else "no Prefect server was running")


@server_group.command("reset")
@click.confirmation_option(prompt="Delete every flow run, deployment and log of this workspace's Prefect server?")
@click.pass_context
def server_reset(ctx: click.Context) -> None:
    """Stop the server and delete its database (runs, deployments, logs); tables stay."""
    from ..backend.local_server import reset_server

    click.echo(reset_server(_workspace(ctx)))


@main.command("deployments")
@click.pass_context
def deployments(ctx: click.Context) -> None:
    """List the server's deployments with their schedule and last run."""
    import asyncio

    from tabulate import tabulate

    from ..plumbing.deployment_runs import deployments_with_last_runs

    api = prefect_api_of(ctx)
    rows = asyncio.run(deployments_with_last_runs(api.url))
    if not rows:
        click.echo(f"no deployments on {api.url} (`./run server` deploys prefect.yaml)")
        return
    click.echo(tabulate([list(r.values()) for r in rows], headers=list(rows[0]), tablefmt="simple"))
