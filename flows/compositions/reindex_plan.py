"""What a re-index rebuilds, decided and checked before it changes anything.

A re-index rebuilds the retrievers that serve, those of the current release and of every running
`odqa serve` (`storage.serving`): BM25 when it serves (BM25 alone is a complete re-index, no
model needed), and each dense model that serves, the default staying the default. Nothing else
changes unless named: `model` adds a model (or keeps one) and makes it the pinned default, which
every later release keeps; `drop_bm25` and `drop_models` leave a retriever out of the new release
(never one a running service answers with). `bm25`/`dense` switched off while such a retriever
serves are refused unless it is dropped by name. With no release yet, a re-index builds the first
one: BM25, and dense with `model`, else with the newest trained model when there is one.

`plan_reindex` runs before the ingest: a model that cannot be loaded, nothing to build, a missing
JDK, or a release that would narrow what serves (`storage.releases.narrowing`, the rule `publish`
applies) fails the run before it has ingested anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...storage import Workspace
from ...storage.model_registry import ModelRef, newest_model, resolve_model
from ...storage.releases import DenseRelease, Release, ServingChange, current_release, narrowing
from ...storage.serving import ServiceRecord, live_services
from ..stages.bm25 import java_preflight_task


class ReindexRefused(ValueError):
    """A re-index that cannot do its work, refused before it changed anything."""


@dataclass(frozen=True)
class ReindexPlan:
    """What one re-index builds and asks `publish` to change."""

    bm25: bool
    models: list[ModelRef]  # passage sides to encode and index, the release's default first
    change: ServingChange
    reasons: list[str]  # why each retriever is (re)built, for the run's log


def _served(current: Release | None, services: list[ServiceRecord]) -> tuple[list[str], dict[str, list[str]]]:
    """(who serves BM25, {dense model: who serves it}), the current release's default model first."""
    bm25 = ([f"release {current.release}"] if current is not None and current.bm25 else []) + [
        service.describe() for service in services if service.bm25]
    models: dict[str, list[str]] = {}
    if current is not None:
        ordered = sorted(current.dense, key=lambda entry: entry.model != current.default_model)
        for entry in ordered:
            models.setdefault(entry.model, []).append(f"release {current.release}")
    for service in services:
        if service.dense_model:
            models.setdefault(service.dense_model, []).append(service.describe())
    return bm25, models


def _served_name(name: str, current: Release | None, models: dict[str, list[str]]) -> str:
    """The served model `drop_models` means by `name` (as served, by folder or index key)."""
    entry = current.dense_of(name) if current is not None else None
    if entry is not None:
        return entry.model
    if name in models:
        return name
    raise ReindexRefused(f"drop_models names {name!r}, which nothing serves (served dense models: "
                         f"{', '.join(models) or 'none'})")  # fmt: skip


def _loadable(ws: Workspace, name: str, why: str) -> ModelRef:
    """The passage side of model `name`, refused unless it can be loaded."""
    # (imports transformers: only a re-index with a model pays for it)
    from ...models.backbone import checkpoint_available

    try:
        ref = resolve_model(ws, name)
    except (ValueError, FileNotFoundError) as error:
        raise ReindexRefused(f"{why}: {name!r} cannot be loaded: {error}") from None
    if not checkpoint_available(ref.path) or not checkpoint_available(ref.passage_path):
        raise ReindexRefused(f"{why}: {name!r} cannot be loaded: it is not a model id of this workspace, a folder "
                             "holding a model (config.json) or a Hugging Face model in the local cache")  # fmt: skip
    return ref.passage_side()


def plan_reindex(ws: Workspace, *, model: str | None, bm25: bool, dense: bool, drop_bm25: bool,
                 drop_models: list[str], by: str) -> ReindexPlan:  # fmt: skip
    """Decide what to rebuild (see the module doc); ReindexRefused when the run cannot do its work."""
    current = current_release(ws)
    services = live_services(ws)
    bm25_served, models_served = _served(current, services)
    dropped = [_served_name(name, current, models_served) for name in drop_models]
    if drop_bm25 and not bm25_served:
        raise ReindexRefused("drop_bm25: nothing serves BM25")
    if model and not dense:
        raise ReindexRefused(f"model {model!r} is named to encode with, but dense is off")
    reasons = []
    build_bm25 = bm25 and not drop_bm25 and (current is None or bool(bm25_served))
    if build_bm25:
        reasons.append(f"bm25: served by {', '.join(bm25_served)}" if bm25_served else "bm25: the first release")
    refs: list[ModelRef] = []
    if model:
        named = _loadable(ws, model, f"model {model!r}")
        served = current.dense_of(named.passage_key) if current is not None else None
        if named.passage_name in dropped or (served is not None and served.model in dropped):
            raise ReindexRefused(f"model {model!r} is named as the new default and in drop_models")
        refs.append(named)
        reasons.append(f"dense model {named.passage_name}: named, the new default (pinned)")
    if dense:
        for name, whom in models_served.items():
            ref = _loadable(ws, name, f"dense model {name} (served by {', '.join(whom)}; drop it by name to stop "
                                      "serving it)") if name not in dropped else None  # fmt: skip
            if ref is not None and all(ref.passage_key != other.passage_key for other in refs):
                refs.append(ref)
                reasons.append(f"dense model {name}: served by {', '.join(whom)}")
        newest = newest_model(ws) if current is None and not model else None
        if newest is not None:
            refs.append(_loadable(ws, newest, f"the newest trained model {newest!r}"))
            reasons.append(f"dense model {newest}: the newest trained model, for the first release")
    change = ServingChange(default_model=refs[0].passage_key if model else None, add_bm25=build_bm25,
                           add_models=tuple(ref.passage_key for ref in refs), drop_bm25=drop_bm25,
                           drop_models=tuple(dropped), by=by)  # fmt: skip
    lost = narrowing(_expected(current, build_bm25, refs, change), current, services, change)
    if lost:
        raise ReindexRefused("the new release would lack " + "; ".join(lost) + ". Nothing was changed. A "
                             "retriever is dropped by name with odqa reindex --drop-bm25 / --drop-model M (the "
                             "deployment's drop_bm25 / drop_models)")  # fmt: skip
    if not build_bm25 and not refs:
        raise ReindexRefused(f"nothing to build: {_why_nothing(bm25, dense, current)}")
    if build_bm25:
        java_preflight_task()
    return ReindexPlan(bm25=build_bm25, models=refs, change=change, reasons=reasons)


def _why_nothing(bm25: bool, dense: bool, current: Release | None) -> str:
    if not (bm25 or dense):
        return "bm25 and dense are off"
    if current is None:
        return "nothing is published yet, bm25 is off and no model is named or trained (name a model)"
    return "everything that serves is dropped"


def _expected(current: Release | None, bm25: bool, refs: list[ModelRef], change: ServingChange) -> Release:
    """The release the plan will publish, in the shape `narrowing` compares (no folders yet)."""
    dense = [DenseRelease(model=ref.passage_name, model_path=ref.passage_path, key=ref.passage_key, indexes={})
             for ref in refs]  # fmt: skip
    release = Release(release="planned", passages_version="planned", bm25="planned" if bm25 else None, dense=dense,
                      default_model=None, created_at="")  # fmt: skip
    keeps = current is not None and current.default_model is not None and release.dense_of(current.default_model)
    default = refs[0].passage_name if change.default_model or (current is None and refs) else (
        current.default_model if keeps else None)  # type: ignore[union-attr]  # fmt: skip
    return Release(release="planned", passages_version="planned", bm25=release.bm25, dense=dense,
                   default_model=default, created_at="")  # fmt: skip
