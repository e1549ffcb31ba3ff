"""`odqa fetch`: public resources downloaded into the workspace, verified, then imported.

Each resource of the registry (`pipelines.downloads.registry`) is fetched into its place under
`<workspace>/downloads/` (`storage.downloads`): resumed and retried (`pipelines.downloads.transfer`),
checked against its publisher's checksum or the sha256 of its first download
(`pipelines.downloads.verify`), published by one rename only when whole and verified, unpacked
when its import needs it, and handed to the import that reads it (`fetch_imports`). A file that
is already there is checked again on every use, never trusted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task

from ...pipelines.downloads.checksums import ChecksumMismatch
from ...pipelines.downloads.registry import Resource, load_registry, mirrored, resolve
from ...pipelines.downloads.transfer import TransferPolicy, transfer
from ...pipelines.downloads.unpack import gunzip, unzip
from ...pipelines.downloads.verify import Verified, verify
from ...storage import Workspace
from ...storage.atomic import building_directory
from ...storage.downloads import (
    DownloadSlot,
    discard_part,
    download_lock,
    download_slot,
    publish,
    record_sha256,
    refuse_links,
    seen_sha256,
)
from ..plumbing.console import tell
from .fetch_imports import Fetched, run_imports


def _unpacked(resource: Resource, slot: DownloadSlot) -> Path:
    """What the import reads: the file itself, or its unpacked form (made once, atomically)."""
    if not resource.unpack:
        return slot.final
    if not slot.unpacked.exists():
        with building_directory(slot.unpacked) as folder:
            (gunzip if resource.unpack == "gunzip" else unzip)(slot.final, folder)
    if resource.unpack == "gunzip":
        return slot.unpacked / slot.final.name.removesuffix(".gz")
    target = slot.unpacked / resource.member if resource.member else slot.unpacked
    if not target.exists():
        raise FileNotFoundError(f"{resource.name}: the archive {slot.final.name} has no {resource.member!r} "
                                f"(registry {resource.origin})")  # fmt: skip
    return target


def fetch_resource(root: Path, resource: Resource, mirror: str = "", policy: TransferPolicy = TransferPolicy(),
                   progress: bool = True) -> Fetched:  # fmt: skip
    """Download (or re-check) one resource under the file's lock; nothing unverified is published."""
    slot = download_slot(root, resource.url)
    with download_lock(root, slot):
        refuse_links(slot)
        downloaded = not slot.final.exists()
        if downloaded:
            transfer([mirrored(url, mirror) for url in resource.urls], slot, resource.size, policy, progress)
            try:
                verified = verify(slot.part, resource, seen_sha256(root, slot), mirror, progress, policy.timeout_s)
            except ChecksumMismatch:
                discard_part(slot)  # a wrong file is not resumed from either: the next fetch starts anew
                raise
            slot_final = _publish(root, slot, resource, verified)
        else:
            verified = verify(slot.final, resource, seen_sha256(root, slot), mirror, progress, policy.timeout_s)
            slot_final = slot.final
        return Fetched(resource, slot_final, _unpacked(resource, slot), verified, downloaded)


def _publish(root: Path, slot: DownloadSlot, resource: Resource, verified: Verified) -> Path:
    if resource.checksum is None and seen_sha256(root, slot) is None:
        record_sha256(root, slot, verified.sha256, verified.bytes, resource.url)
    return publish(slot)


@task(name="fetch-resource")
def fetch_task(root: str, resource: Resource, mirror: str) -> Fetched:
    fetched = fetch_resource(Path(root), resource, mirror)
    action = "downloaded" if fetched.downloaded else "already here"
    tell("fetch %s: %s, %s bytes, %s", resource.name, action, f"{fetched.verified.bytes:,}", fetched.verified.verified_by)
    return fetched


def _summary(fetched: Fetched, imported: dict[str, Any]) -> dict[str, Any]:
    return {"name": fetched.resource.name, "path": str(fetched.path), "file": str(fetched.file),
            "bytes": fetched.verified.bytes, "sha256": fetched.verified.sha256,
            "verified_by": fetched.verified.verified_by, "downloaded": fetched.downloaded,
            **imported}  # fmt: skip


@flow(name="fetch")
def fetch_flow(names: list[str], workspace: str = "", registry: str = "", mirror: str = "",
               run_import: bool = True) -> dict[str, Any]:  # fmt: skip
    """Download public resources into the workspace, verify them, and import them.

    Args:
        names: Resource names of the registry (`odqa fetch --list`), e.g. data.retriever.qas.nq-test.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        registry: A registry file of your own (YAML or JSON, same schema) whose entries are added to
            the shipped ones, or replace those of the same name; empty: the shipped registry only.
        mirror: A base URL that every https://HOST/PATH is fetched through, as BASE/HOST/PATH (a
            proxy or an offline mirror); empty: the publishers' URLs.
        run_import: Run the import each resource feeds (passages, questions, PAQ, Wikipedia,
            categories) once it is verified; off: download and verify only.
    """
    if not names:
        raise ValueError("name at least one resource to fetch (`odqa fetch --list` shows them)")
    if mirror:
        mirrored("https://example.org/x", mirror)  # refuses a malformed mirror before any download
    resources = load_registry(registry or None)
    wanted = resolve(list(names), resources)
    root = Workspace.resolve(workspace or None).root
    fetched = [fetch_task(str(root), resource, mirror) for resource in wanted]
    imported = run_imports(str(root), fetched, resources) if run_import else {}
    return {"workspace": str(root),
            "resources": [_summary(f, imported.get(f.resource.name, {"imported": ""})) for f in fetched]}  # fmt: skip
