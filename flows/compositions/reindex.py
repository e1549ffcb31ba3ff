"""`odqa reindex` and the weekly re-index deployment: new passages in, fresh indexes published.

A re-index ingests a new dump or a passages file, then rebuilds the retrievers that serve with the
workspace's own index stages, `odqa bm25 index` and `odqa index build` for each served model, and
publishes the result as a new release (`storage.releases`), which a running `odqa serve` switches
to without failing a request. What it rebuilds, and what it may drop or pin by name, is decided
and checked first (`flows.compositions.reindex_plan`): a run that cannot do its work fails before
it ingests anything. The builds of the new passages go beside the ones being served and are
published only when complete; a failed or killed re-index publishes nothing.

Re-indexes are incremental. A new dump is diffed page by page against the previous re-index's
(`flows.stages.wikipedia.ingest_dump_incremental`): only new and changed pages are cleaned again.
Encoding reuses the vectors of every passage the model already encoded unchanged
(`flows.stages.encode`), so only new and changed passages are encoded. The figures (pages re-cleaned /
reused / removed, passages re-encoded / reused / removed, build times) go into the release
record and the `metrics` table under the run name `reindex:<release>`.

The weekly deployment is given no dump or passages: it watches a source (`watch`: a dump, a
passages file or a folder where new files land, by default `<workspace>/incoming/`; see
`flows.compositions.incoming`) and takes the files that are complete there (unchanged for
`settle_seconds`, not under a temporary name, not a link). Every file a run takes is committed
in one switch, or none is (`flows.compositions.ingest_run`): a malformed one fails the run before
anything is committed and is set aside. Every run logs where it looked, what it found, what it
added, replaced, found unchanged or left for later (and why), and whether a new release was
published.

Two re-indexes never overlap (`storage.releases.reindex_lock`): a second one waits up to
`wait_seconds` and is then refused, saying which run holds the lock since when.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from prefect import flow

from ...storage import Workspace
from ...storage.choices import IndexType, PassageFormat
from ...storage.metrics import has_run, metric_rows, numeric_figures
from ...storage.model_registry import ModelRef
from ...storage.releases import (
    Publication,
    Release,
    current_hold,
    current_release,
    published_releases,
    reindex_lock,
)
from ...storage.reports import Report
from ..plumbing.artifacts import publish_table
from ..plumbing.bounds import AtLeastOne, NotNegative, Positive
from ..plumbing.publish import publish_indexes
from ..plumbing.report_text import log_report
from ..plumbing.runtime import flow_run_logs, stage_logger
from ..plumbing.task_runners import RunnerSettings
from ..stages.bm25 import build_bm25
from ..stages.encode import encode
from ..stages.index import index_params, index_task
from .incoming import SETTLE_SECONDS, default_source, given, look_at
from .ingest_run import IngestRunReport, ingest_together
from .reindex_plan import ReindexPlan, ReindexRefused, plan_reindex


@dataclass
class ReindexReport(Report):
    release: str
    previous: str | None
    passages_version: str
    model: str | None  # the default model of the release (None: BM25 only)
    models: list[str] = field(default_factory=list)  # every dense model rebuilt, the default first
    dropped: list[str] = field(default_factory=list)  # what was dropped by name
    figures: dict[str, Any] = field(default_factory=dict)
    pruned_releases: list[str] = field(default_factory=list)
    ingested: dict[str, Any] = field(default_factory=dict)  # what the run took and left (IngestRunReport)
    held: str | None = None  # why nothing was published: a rollback holds these passages or builds
    spread: ClassVar[dict[str, str]] = {"figures": ""}
    hidden: ClassVar[tuple[str, ...]] = ("ingested",)


def _build(ws: Workspace, plan: ReindexPlan, version: str, figures: dict[str, Any], index_type: IndexType,
           batch_size: int, shard_size: int, runner: RunnerSettings | None, memory_gb: float | None,
           threads: int | None) -> None:  # fmt: skip
    """Rebuild the retrievers of `plan` over passages `version` (what imports commit meanwhile
    waits for the next re-index), adding their figures."""
    if plan.bm25:
        built = build_bm25(ws, threads, version)
        figures.update({"bm25_documents": built.documents, "bm25_seconds": built.build_seconds})
    for number, ref in enumerate(plan.models):
        made = _dense_figures(ws, ref, version, index_type, batch_size, shard_size, runner, memory_gb)
        # the default model's figures as they are; another model's under its index key
        figures.update(made if number == 0 else {f"{ref.passage_key}:{k}": v for k, v in made.items()})


def _ingest(ws: Workspace, dump: str | None, passages: str | None, passages_format: str, wait_s: float
            ) -> IngestRunReport:  # fmt: skip
    """Ingest the dump and passages file given to the run (re-indexing from a corpus file means
    taking its new content: it replaces its earlier rows), committed together."""
    return ingest_together(ws, given(dump, passages, passages_format), wait_s)


def _ingest_watched(ws: Workspace, watch: str | None, passages_format: str, settle_seconds: float, wait_s: float
                    ) -> IngestRunReport:  # fmt: skip
    """Ingest what is complete at the watched source (`flows.compositions.incoming`), logging where
    it looked and what it found there."""
    source = Path(watch).expanduser() if watch else default_source(ws.root)
    if not watch:
        source.mkdir(parents=True, exist_ok=True)  # so a user sees where new files go
    incoming = look_at(source, passages_format, settle_seconds)
    stage_logger().info("re-index %s", incoming.describe())
    return ingest_together(ws, incoming, wait_s)


def _dense_figures(ws: Workspace, ref: ModelRef, version: str, index_type: IndexType, batch_size: int,
                   shard_size: int, runner: RunnerSettings | None, memory_gb: float | None) -> dict[str, Any]:  # fmt: skip
    """Encode passages `version` with one model (reusing unchanged vectors) and build its index;
    their figures."""
    encoded = encode(ws, ref, shard_size, batch_size, "float32", "auto", runner, version)
    started = time.perf_counter()
    built = index_task(str(ws.root), ref, index_type, asdict(index_params(index_type)), memory_gb, version)
    return {"encoded_passages": encoded.passages, "reencoded_passages": encoded.encoded_now,
            "reused_passages": encoded.reused, "removed_passages": encoded.removed,
            "encode_seconds": encoded.seconds,
            "passages_per_second": round(encoded.encoded_now / encoded.seconds, 1) if encoded.seconds else None,
            "dense_vectors": built.vectors, "faiss_parts": built.parts,
            "faiss_seconds": round(time.perf_counter() - started, 3)}  # fmt: skip


def checked_plan(ws: Workspace, *, model: str | None, bm25: bool, dense: bool, drop_bm25: bool,
                 drop_models: list[str] | None, holder: str) -> ReindexPlan:  # fmt: skip
    """What this run rebuilds, checked before it changes anything (`flows.compositions.reindex_plan`);
    logs why each retriever is rebuilt."""
    log = stage_logger()
    try:
        plan = plan_reindex(ws, model=model, bm25=bm25, dense=dense, drop_bm25=drop_bm25,
                            drop_models=list(drop_models or []), by=f"odqa reindex ({holder})")  # fmt: skip
    except ReindexRefused as refused:
        raise ReindexRefused(f"re-index of {ws.root} refused: {refused}") from None
    for reason in plan.reasons:
        log.info("rebuilds %s", reason)
    for dropped in plan.change.drop_models:
        log.info("drops dense model %s (named)", dropped)
    if plan.change.drop_bm25:
        log.info("drops bm25 (named)")
    return plan


def _record_figures(ws: Workspace, release: str, figures: dict[str, Any], config: dict[str, Any],
                    report: ReindexReport) -> None:  # fmt: skip
    """The re-index's figures as `metrics` rows of the run `reindex:<release>`, in one commit."""
    with ws.transaction(f"reindex:{release}") as tx:
        tx.write("metrics", metric_rows(f"reindex:{release}", numeric_figures(figures), config=config),
                 source=f"reindex:{release}")  # fmt: skip
        tx.report = report.ledger()


def _figures_unrecorded(ws: Workspace, release: Release, current: Release | None) -> bool:
    """Whether `release` was published by a re-index that stopped before it recorded its figures:
    the release carries them (only a re-index publishes figures), `metrics` has no row of the run
    `reindex:<release>`. The publish and the record are two commits; a kill between them (the
    publish's pruning of old builds can take a while) would otherwise lose the figures for good,
    since every later run finds the release current and publishes nothing."""
    published = current is not None and release.release <= current.release  # (a newer one never served)
    return published and bool(release.figures) and not has_run(ws, f"reindex:{release.release}")


@flow(name="reindex")
def reindex_flow(
    workspace: str | None = None,
    dump: str | None = None,
    passages: str | None = None,
    passages_format: PassageFormat = "dpr-tsv",
    model: str | None = None,
    watch: str | None = None,
    index_type: IndexType = "flat",
    bm25: bool = True,
    dense: bool = True,
    drop_bm25: bool = False,
    drop_models: list[str] | None = None,
    wait_seconds: NotNegative = 0.0,
    keep: AtLeastOne = 3,
    threads: AtLeastOne | None = None,
    batch_size: AtLeastOne = 64,
    shard_size: AtLeastOne = 50_000,
    runner: RunnerSettings | None = None,
    memory_gb: Positive | None = None,
    settle_seconds: NotNegative = SETTLE_SECONDS,
) -> ReindexReport:
    """Ingest a new dump or passages file, rebuild the retrievers that serve beside them, publish.

    Args:
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        dump: A new MediaWiki XML dump to ingest first (only changed pages are cleaned again);
            empty: none.
        passages: A passages file to import first (its rows replace an earlier import of the same file);
            empty: none.
        passages_format: Format of passages (and of a watched passages file whose name does not
            say it): dpr-tsv or beir.
        model: A model to encode with, named as the new default model: pinned in the release and
            kept by every later re-index; empty: the dense models that serve now (the first
            re-index: the newest trained model, if any).
        watch: When no dump or passages is given: the source looked at on every run, a dump
            (.xml, .xml.bz2), a passages file (.tsv, .jsonl) or a folder where such files land
            (the newest complete dump and every complete passages file in it are ingested, all
            or none; write a file under a temporary name such as name.tsv.part, then rename it);
            empty: the folder incoming/ of the workspace.
        index_type: FAISS index type: flat, hnsw or ivfpq.
        bm25: Rebuild the BM25 (Lucene) index when it serves (the first re-index builds it); off
            while BM25 serves is refused unless drop_bm25.
        dense: Encode the passages and rebuild the FAISS index of each dense model that serves;
            off while one serves is refused unless drop_models names it.
        drop_bm25: Publish without BM25 (never while a running odqa serve answers with it).
        drop_models: Dense models to publish without (never one a running odqa serve answers
            with); empty: none.
        wait_seconds: How long to wait for a re-index that holds the workspace's lock, and then
            for an `odqa import passages` that writes the passages while this one has files to
            take, before giving up.
        keep: Newest releases kept (the current one always), so searches that started on an older
            one finish; older ones and the index builds only they use are deleted.
        threads: BM25 indexing threads; empty: one per CPU core.
        batch_size: Passages per encoding batch.
        shard_size: Passages per encoding shard (the unit of work on a runner and of resumption).
        runner: Encode shards as tasks on this task runner (threads, processes or a Dask cluster);
            empty: in process, or on $ODQA_DASK_ADDRESS's cluster when set.
        memory_gb: Memory budget of the FAISS build in GB; empty: no limit.
        settle_seconds: A watched file is taken once unchanged (size and time) for this long;
            one changed more recently waits for a later run.
    """
    log = stage_logger()
    ws = Workspace.resolve(workspace)
    from prefect.runtime import flow_run

    holder = f"flow run {flow_run.get_name() or flow_run.get_id() or '?'}"
    with reindex_lock(ws, wait_seconds, holder), flow_run_logs():
        plan = checked_plan(ws, model=model, bm25=bm25, dense=dense, drop_bm25=drop_bm25, drop_models=drop_models,
                            holder=holder)  # fmt: skip
        before = ws.rows("passages")
        if dump or passages:
            ingested = _ingest(ws, dump, passages, passages_format, wait_seconds)
        else:
            ingested = _ingest_watched(ws, watch, passages_format, settle_seconds, wait_seconds)
        # the passages built and published, kept on disk until the release pins them
        with ws.reading("passages", what=f"reindex ({holder})") as snapshot:
            if snapshot.rows("passages") == 0:
                raise ValueError("the passages table is empty: give a dump or passages to ingest")
            version = snapshot.table_version("passages")
            figures: dict[str, Any] = {"passages": snapshot.rows("passages")}
            log.info("passages: %d before, %d now (version %s)", before, figures["passages"], version)
            dumped = ingested.dump or {}
            figures.update({name: dumped[name] for name in ("pages_recleaned", "pages_reused", "pages_removed")
                            if dumped.get(name) is not None})  # fmt: skip
            hold = current_hold(ws)
            if hold is not None and hold.holds_passages(version):
                # rolled back from these very passages: building over them again would be for nothing
                serving = current_release(ws)
                published = Publication(serving, False, serving.release if serving else None, [], [],
                                        held=hold.describe())  # fmt: skip
            else:
                _build(ws, plan, version, figures, index_type, batch_size, shard_size, runner, memory_gb, threads)
                published = publish_indexes(ws, version, change=plan.change, figures=figures, keep=keep)
        if published.withheld:
            raise ReindexRefused(f"the re-index built passages {version} but did not publish them: since it started, "
                                 f"what serves changed and the release would lack {'; '.join(published.withheld)}. "
                                 "Run it again: it rebuilds what serves now")  # fmt: skip
        release = published.release
        assert release is not None  # published, or the current release serves these very builds
        report = ReindexReport(release=release.release, previous=published.previous, passages_version=version,
                               model=release.default_model, models=[ref.passage_name for ref in plan.models],
                               dropped=release.dropped if published.published else [], figures=figures,
                               pruned_releases=published.pruned_releases, ingested=ingested.as_dict(),
                               held=published.held, noop=not published.published)  # fmt: skip
        if published.published:
            _record_figures(ws, release.release, figures, {"model": release.default_model, "index_type": index_type,
                                                           "ingested": report.ingested}, report)  # fmt: skip
        current = current_release(ws)
        for earlier in published_releases(ws):
            if _figures_unrecorded(ws, earlier, current):
                # the run that published it was stopped (killed) between its publish and its record
                _record_figures(ws, earlier.release, earlier.figures, {
                    "model": earlier.default_model, "recorded_by": f"odqa reindex ({holder}), a later run: the one "
                    "that published this release stopped before it recorded its figures"}, report)  # fmt: skip
                log.info("recorded the figures of release %s in metrics (reindex:%s): the re-index that published "
                         "it stopped before it recorded them", earlier.release, earlier.release)  # fmt: skip
    if published.published:
        publish_table(f"reindex-{release.release}", f"Re-index {release.release}",
                      [{"figure": k, "value": v} for k, v in figures.items()])  # fmt: skip
        log.info("re-index %s published; pruned old releases: %s", release.release,
                 ", ".join(published.pruned_releases) or "none")  # fmt: skip
    elif published.held:
        log.info("nothing published: %s (no-op); release %s serves", published.held, release.release)
    else:
        log.info("nothing changed: release %s already serves passages %s with these indexes (no-op)",
                 release.release, version)  # fmt: skip
    log_report(f"reindex {release.release}", report)
    return report
