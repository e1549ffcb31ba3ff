"""`odqa fetch`: download the public resources the papers use, verified, then import them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .groups import VerbCommand, main, workspace_arg


class ListOrFetch(VerbCommand):
    """`--list` only reads the registry: it answers before any workspace is made or server started."""

    def invoke(self, ctx: click.Context):
        if ctx.params.get("show_list"):
            return click.Command.invoke(self, ctx)
        if not ctx.params.get("names"):
            raise click.UsageError("name at least one resource to fetch, or --list to see them")
        return super().invoke(ctx)


def _check_names(params: dict[str, Any]) -> None:
    """Unknown names, a bad registry file or mirror are refused before a workspace or server starts."""
    from ...pipelines.downloads.registry import load_registry, mirrored, resolve

    try:
        resolve(list(params["names"]), load_registry(params["registry"] or None))
        if params["mirror"]:
            mirrored("https://example.org/file", params["mirror"])
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _size_text(size: int | None) -> str:
    """In the binary units the download's progress and messages use (`storage.sizes`)."""
    from ...storage.sizes import format_bytes

    return "?" if size is None else format_bytes(size)


def _list_rows(registry: str, workspace: str | None) -> list[dict[str, Any]]:
    from ...pipelines.downloads.registry import load_registry
    from ...storage.downloads import download_key, recorded_sizes
    from ...storage.workspace import chosen_path

    recorded = recorded_sizes(Path(chosen_path(workspace)))
    rows = []
    for name, resource in load_registry(registry or None).items():
        size = resource.size if resource.size is not None else recorded.get(download_key(resource.url))
        dataset = f"{resource.dataset}:{resource.split}" if resource.split else resource.dataset
        rows.append({"name": name, "size": _size_text(size), "format": resource.format or "-",
                     "dataset": dataset or "-", "import": resource.feeds,
                     "checksum": resource.checksum.algorithm if resource.checksum else "-"})  # fmt: skip
    return rows


@main.command("fetch", cls=ListOrFetch, precheck=_check_names)
@click.argument("names", nargs=-1)
@click.option("--list", "show_list", is_flag=True, help="List the resources (with --registry: yours too) and exit.")
@click.option("--registry", default="", metavar="FILE",
              help="Your own registry (YAML or JSON, same schema as the shipped one): its entries are added, "
              "or replace those of the same name.")
@click.option("--mirror", default="", metavar="BASE",
              help="Fetch every https://HOST/PATH as BASE/HOST/PATH (a proxy or an offline mirror).")
@click.option("--import/--no-import", "run_import", default=True, show_default=True,
              help="Run the import each resource feeds once it is verified.")
@click.pass_context
def fetch(ctx: click.Context, names: tuple[str, ...], show_list: bool, registry: str, mirror: str,
          run_import: bool) -> None:  # fmt: skip
    """Download NAME... (resources of the registry) into <workspace>/downloads, resuming cut
    transfers and retrying failures, check each file's checksum, then run its import.

    A publisher's checksum (BEIR's md5, a Wikipedia dump's sha1sums) is checked; where there is
    none (DPR, EntityQuestions, PAQ) the sha256 of the first download is recorded and every later
    use is checked against it. A file appears under its name only once whole and verified."""
    from ...pipelines.downloads.registry import RegistryError

    if show_list:
        from tabulate import tabulate

        try:
            rows = _list_rows(registry, ctx.find_root().obj.get("workspace"))
        except RegistryError as exc:
            raise click.UsageError(str(exc)) from None
        click.echo(tabulate([list(r.values()) for r in rows], headers=list(rows[0]), tablefmt="simple"))
        return
    from ..compositions.fetch import fetch_flow

    summary = fetch_flow(names=list(names), workspace=workspace_arg(ctx), registry=registry, mirror=mirror,
                         run_import=run_import)  # fmt: skip
    for item in summary["resources"]:
        imported = item.get("imported") or item.get("import_note") or "not imported"
        click.echo(f"{item['name']}: {item['path']} ({item['bytes']:,} bytes, {item['verified_by']}; {imported})")
