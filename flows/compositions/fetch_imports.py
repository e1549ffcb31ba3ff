"""The import each fetched resource feeds (its registry entry's `import`), run with the same
flows as `odqa import passages|questions`, `odqa questions paq` and `odqa ingest wikipedia|categories`.

Corpora go first (a Wikipedia dump, passages), then the category graph, then question sets, so
question imports find the passages their contexts name. The category SQL dumps of one dump
(`dataset`) are ingested together once its page and categorylinks files are both verified in the
workspace (fetched now or earlier); linktarget and redirect join them when they are there too.
Each import is a no-op when its file was imported before with identical content.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...pipelines.downloads.registry import Resource
from ...pipelines.downloads.verify import Verified
from ...storage.downloads import download_slot
from ..stages.categories import ingest_categories_flow
from ..stages.passages import import_passages_flow
from ..stages.questions import import_questions_flow, paq_questions_flow
from ..stages.wikipedia import ingest_wikipedia_flow


@dataclass(frozen=True)
class Fetched:
    """One resource on disk, verified: the file, what its import reads (`path`), how it was checked."""

    resource: Resource
    file: Path
    path: Path
    verified: Verified
    downloaded: bool

_ORDER = ("ingest wikipedia", "import passages", "ingest categories", "import questions", "questions paq", "none")


def _import_one(root: str, fetched: Fetched) -> dict[str, Any]:
    resource, path = fetched.resource, str(fetched.path)
    if resource.feeds == "import passages":
        report = import_passages_flow(fmt=resource.format, path=path, workspace=root)
    elif resource.feeds == "import questions":
        report = import_questions_flow(fmt=resource.format, path=path, dataset=resource.dataset,
                                       split=resource.split, workspace=root)  # fmt: skip
    elif resource.feeds == "questions paq":
        report = paq_questions_flow(path=path, dataset=resource.dataset, workspace=root)
    else:
        report = ingest_wikipedia_flow(dump=path, workspace=root)
    return {"imported": resource.feeds, "import_report": report.as_dict()}


def _category_files(root: str, dataset: str, resources: dict[str, Resource]) -> dict[str, str]:
    """The verified, published category dumps of one dump, by table (fetched now or before)."""
    found: dict[str, str] = {}
    for resource in resources.values():
        if resource.feeds == "ingest categories" and resource.dataset == dataset:
            final = download_slot(Path(root), resource.url).final
            if final.exists():
                found[resource.format] = str(final)
    return found


def _import_categories(root: str, dataset: str, members: list[Fetched],
                       resources: dict[str, Resource]) -> dict[str, Any]:  # fmt: skip
    files = {f.resource.format: str(f.path) for f in members} | {
        table: path for table, path in _category_files(root, dataset, resources).items()
        if table not in {f.resource.format for f in members}}  # fmt: skip
    missing = [table for table in ("page", "categorylinks") if table not in files]
    if missing:
        names = [r.name for r in resources.values()
                 if r.feeds == "ingest categories" and r.dataset == dataset and r.format in missing]  # fmt: skip
        return {"imported": "", "import_note": f"waiting for {', '.join(missing)} of {dataset}: fetch {' '.join(names)}"}
    report = ingest_categories_flow(page=files["page"], categorylinks=files["categorylinks"],
                                    linktarget=files.get("linktarget"), redirect=files.get("redirect"),
                                    workspace=root)  # fmt: skip
    return {"imported": "ingest categories", "import_report": report.as_dict()}


def run_imports(root: str, fetched: list[Fetched], resources: dict[str, Resource]) -> dict[str, dict[str, Any]]:
    """Run each fetched resource's import, in dependency order; by resource name, what was imported."""
    done: dict[str, dict[str, Any]] = {}
    for feeds in _ORDER:
        batch = [f for f in fetched if f.resource.feeds == feeds]
        if feeds == "none":
            done.update({f.resource.name: {"imported": ""} for f in batch})
        elif feeds == "ingest categories":
            for dataset in dict.fromkeys(f.resource.dataset for f in batch):
                members = [f for f in batch if f.resource.dataset == dataset]
                outcome = _import_categories(root, dataset, members, resources)
                done.update({f.resource.name: outcome for f in members})
        else:
            done.update({f.resource.name: _import_one(root, f) for f in batch})
    return done
