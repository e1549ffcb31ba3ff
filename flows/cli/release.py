"""`odqa release show | pin`: what the published release serves and why, and pinning its default model."""

from __future__ import annotations

import click

from .groups import MODEL_HELP, release_group, workspace_of


@release_group.command("show")
@click.pass_context
def release_show(ctx: click.Context) -> None:
    """What the current release serves, its default model and why, the running services registered
    in the workspace, and a release withheld because it would have narrowed what serves."""
    from ...storage.releases import current_release, last_refusal
    from ...storage.serving import live_services

    ws = workspace_of(ctx)
    current = current_release(ws)
    if current is None:
        click.echo(f"nothing published in {ws.root} yet (odqa bm25 index, odqa index build, odqa reindex)")
    else:
        click.echo(f"release {current.release} (passages {current.passages_version}, published {current.created_at})")
        click.echo(f"  serves: {', '.join(current.retrievers())}")
        click.echo(f"  default model: {current.default_model or 'none'}"
                   + (f" ({current.default_why()})" if current.default_model else ""))  # fmt: skip
        files = current.passages_files
        click.echo(f"  passages: {sum(f.rows for f in files):,} in {len(files)} file(s), kept while the release is"
                   if files else "  passages: the current table's (published by an older odqa)")  # fmt: skip
        if current.dropped:
            click.echo(f"  dropped by name: {', '.join(current.dropped)}")
    services = live_services(ws)
    click.echo(f"running services: {len(services) or 'none'}")
    for service in services:
        answers = (["bm25"] if service.bm25 else []) + ([f"dense model {service.dense_model}"] if service.dense_model else [])
        click.echo(f"  {service.describe()}: release {service.release or 'none yet'}, {', '.join(answers) or 'nothing'}")
    refused = last_refusal(ws)
    if refused is not None:
        click.echo(f"withheld at {refused['at']}: passages {refused['passages_version']} ({refused['by']}) would "
                   f"have lacked {'; '.join(refused['lacks'])}")  # fmt: skip


@release_group.command("pin")
@click.option("--model", required=True, help=f"A dense model the current release serves. {MODEL_HELP}")
@click.pass_context
def release_pin(ctx: click.Context, model: str) -> None:
    """Make MODEL the release's default model (what a service encodes questions with unless started
    with --model), pinned: every later release, re-indexes included, keeps it until another is
    named. Publishes the current indexes again with that default; nothing is rebuilt."""
    from ...storage.releases import pin_default

    done = pin_default(workspace_of(ctx), model, by="odqa release pin")
    release = done.release
    if done.withheld:
        raise click.ClickException(f"not pinned: the release would lack {'; '.join(done.withheld)}")
    if release is not None:
        click.echo(f"release {release.release}: default model {release.default_model} ({release.default_why()})"
                   + ("" if done.published else "; it was already"))  # fmt: skip
