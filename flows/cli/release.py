"""`odqa release show | pin | rollback | unhold`: what the published release serves and why, pinning its
default model, serving a kept release again and letting what a rollback held be published again."""

from __future__ import annotations

import click

from .groups import MODEL_HELP, release_group, workspace_of


@release_group.command("show")
@click.pass_context
def release_show(ctx: click.Context) -> None:
    """What the current release serves, its default model and why, the running services registered
    in the workspace, the running builds that keep older table files (read leases), and a release
    withheld because it would have narrowed what serves."""
    from ...storage.read_leases import describe_lease, older_readers
    from ...storage.releases import current_hold, current_release, last_refusal
    from ...storage.serving import live_services

    ws = workspace_of(ctx)
    current = current_release(ws)
    if current is None:
        click.echo(f"nothing published in {ws.root} yet (odqa bm25 index, odqa index build, odqa reindex)")
    else:
        click.echo(f"release {current.release} (passages {current.passages_version}, published {current.created_at})")
        if current.restored_from:
            click.echo(f"  restored from release {current.restored_from} by a rollback")
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
    readers = older_readers(ws.root, ws.snapshot())
    if readers:  # (why the files of older passages are still on disk)
        click.echo(f"readers keeping older table files until they finish: {len(readers)}")
        for lease, older in readers:
            click.echo(f"  {describe_lease(lease)} ({older} file(s) no longer current)")
    hold = current_hold(ws)
    if hold is not None:
        click.echo(f"held: {hold.describe()}")
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


@release_group.command("rollback")
@click.option("--to", "to", default=None, metavar="RELEASE",
              help="The kept release to serve again (its id, or a prefix only it has); default: the newest "
                   "one before the current one that serves other indexes and is not held.")  # fmt: skip
@click.pass_context
def release_rollback(ctx: click.Context, to: str | None) -> None:
    """Serve a kept release again (published anew, naming the one it restores); running services
    switch to it. What the current release serves is held: a re-index does not publish those
    passages (or, for the same passages, those builds) again until `odqa release unhold` or new
    passages. Refused, changing nothing, when its indexes or passages are gone or it would take
    from a running service the retriever it answers with."""
    from ...storage.release_rollback import rollback

    done = rollback(workspace_of(ctx), to, by="odqa release rollback")
    release = done.release
    assert release is not None
    pruned = f"; {len(done.pruned_releases)} old release(s) pruned" if done.pruned_releases else ""
    click.echo(f"release {release.release}: release {release.restored_from} serves again (was {done.previous}{pruned})")
    if release.dropped:
        click.echo(f"  it does not serve {', '.join(release.dropped)}")
    click.echo(f"held: {done.held}")


@release_group.command("unhold")
@click.pass_context
def release_unhold(ctx: click.Context) -> None:
    """Let what the last rollback held be published again (by the next re-index or index build);
    nothing is published now."""
    from ...storage.releases import unhold

    hold = unhold(workspace_of(ctx))
    click.echo("nothing was held" if hold is None else f"no longer held: what release {hold.release.release} served "
               "may be published again (the next odqa reindex, odqa bm25 index or odqa index build does)")  # fmt: skip
