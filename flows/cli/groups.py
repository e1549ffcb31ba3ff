"""The `odqa` command group and its sub-groups; verb modules attach commands to these.

Verb modules import their flows inside the command body, so `odqa --help` and `odqa sql` start
in well under a second instead of paying for torch, pyserini and Prefect imports.
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from storage import Workspace


class OdqaGroup(click.Group):
    """Turns an exception into one clear line (the traceback only with --debug / ODQA_DEBUG=1)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("odqa: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            if os.environ.get("ODQA_DEBUG") or (ctx.obj or {}).get("debug"):
                traceback.print_exc()
            click.echo(f"odqa: error: {exc}", err=True)
            sys.exit(1)


@click.group(cls=OdqaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--workspace",
    "-w",
    "workspace",
    default=None,
    metavar="DIR",
    help="Workspace directory (default: $ODQA_WORKSPACE, else ./workspace).",
)
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.pass_context
def main(ctx: click.Context, workspace: str | None, debug: bool) -> None:
    """odqa: open-domain QA retrievers from public sources, as Prefect flows over a DuckDB workspace."""
    # A flow run without a configured server starts a temporary one; on a busy 2-core machine
    # that can take longer than Prefect's 20 s default, which would fail every verb.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    ctx.ensure_object(dict)
    ctx.obj["workspace"] = workspace
    ctx.obj["debug"] = debug


def workspace_of(ctx: click.Context) -> Workspace:
    """The workspace chosen by the global option (resolved when a verb needs it)."""
    return Workspace.resolve(ctx.find_root().obj.get("workspace"))


def workspace_arg(ctx: click.Context) -> str:
    """The workspace path as a string, the form flows take as a parameter."""
    return str(workspace_of(ctx).root)


@main.group("ingest")
def ingest_group() -> None:
    """Bring raw public sources into the workspace (Wikipedia dump, category SQL dumps)."""


@main.group("import")
def import_group() -> None:
    """Import existing corpora, question sets and runs in standard formats."""


@main.group("export")
def export_group() -> None:
    """Export workspace tables in standard formats."""
