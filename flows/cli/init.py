"""`odqa init [DIR]`: make a folder an odqa workspace (`storage.workspace_marker`).

The verbs that bring data in make a new or empty folder a workspace by themselves; `init` is for a
folder that already holds other files and is meant to be one anyway, or to create an empty
workspace ahead of time. It runs no flow and starts no server."""

from __future__ import annotations

import click

from .groups import main


@main.command("init")
@click.argument("directory", required=False, metavar="[DIR]")
@click.pass_context
def init(ctx: click.Context, directory: str | None) -> None:
    """Make DIR (default: --workspace, else $ODQA_WORKSPACE, else ./workspace) an odqa workspace:
    the folder is created when missing and marked; a workspace stays as it is."""
    from ...storage import Workspace

    chosen = directory or ctx.find_root().obj.get("workspace")
    try:
        ws = Workspace.init(chosen)
    except NotADirectoryError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"odqa workspace: {ws.root}")
