"""Category graph ingest (SQL dumps) and domain labelling (DESIRE-ME 4.1) as Prefect flows.

`ingest_categories_flow`: page + categorylinks (+ linktarget, + redirect) SQL dumps ->
`category_links` (source "sql-dumps"), and -> `articles` when no XML dump was ingested. Keyed on the dumps' content
hashes and options: re-running on the same files is a no-op.

`label_domains_flow`: `category_links` (+ `articles` for redirects and category-less articles)
-> `domains`; the questions' `domains` column (union over their positive passages' articles);
coverage figures (DESIRE-ME Table 1) into `metrics` and a bar chart under the workspace's plots.
Keyed on the versions of every table it reads plus the domain settings, so it runs again
whenever links, articles, passages, questions or their positives change, and is a no-op otherwise.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
from prefect import flow, task

from ...pipelines.categories.coverage import (
    CoverageReport,
    assign_question_domains,
    coverage_report,
    plot_domain_counts,
    positive_passage_domains,
)
from ...pipelines.categories.domain_config import DomainConfig, load_domain_config
from ...pipelines.categories.graph_input import SqlCategoryGraph
from ...pipelines.categories.labeller import label_domains
from ...storage import Workspace
from ...storage.articles import content_titles
from ...storage.fingerprint import file_sha256, fingerprint
from ...storage.questions import positives_fingerprint
from ...storage.reports import Report
from ..plumbing.bounds import AtLeastOne
from ..plumbing.report_text import log_report
from ..plumbing.runtime import stage_logger
from ..plumbing.skip_unchanged import finished_report

INGEST_STAGE = "ingest-categories"
SQL_SOURCE = "sql-dumps"
LABEL_STAGE = "label-domains"
LABEL_SOURCE = "label-domains"
PLOT_NAME = "domain_coverage"
#: Tables the labelling reads: a new version of any of them makes the stage run again (questions
#: are fingerprinted by content instead, see `storage.questions.positives_fingerprint`).
LABEL_INPUTS = ("category_links", "articles", "passages")


def _with_source(batch: pa.RecordBatch, source: str) -> pa.Table:
    table = pa.Table.from_batches([batch])
    return table.append_column("source", pa.array([source] * table.num_rows, pa.string()))


def _xml_articles_present(ws: Workspace) -> bool:
    return any(e.source != SQL_SOURCE and e.rows for e in ws.snapshot().files("articles"))


@dataclass
class IngestCategoriesReport(Report):
    dumps: dict[str, str | None]  # role (page, categorylinks, linktarget, redirect) -> file
    graph: dict[str, Any]  # what reading the dumps found (rows, schema, skipped statements, ...)
    category_links_written: int
    articles_written: int
    articles_skipped_xml_present: bool
    spread: ClassVar[dict[str, str]] = {"dumps": "", "graph": ""}


@dataclass
class LabelDomainsReport(Report):
    labels: dict[str, Any]  # what the category walk found
    domain_rows: int
    coverage_figures: dict[str, Any]
    questions_labelled_share: dict[str, float]  # dataset -> share of its questions with a label
    plot: str
    coverage: str  # the coverage as a text table
    spread: ClassVar[dict[str, str]] = {"labels": "labels_", "coverage_figures": "coverage_"}
    hidden: ClassVar[tuple[str, ...]] = ("coverage",)


# -- ingest ---------------------------------------------------------------------------------------
@task(name="fingerprint-category-dumps")
def fingerprint_dumps_task(dumps: dict[str, str | None], params: dict[str, Any]) -> str:
    hashes = {role: file_sha256(path) if path else None for role, path in dumps.items()}
    return fingerprint(INGEST_STAGE, hashes, params)


@task(name="ingest-category-dumps", tags=["cpu-parallel"])
def ingest_dumps_task(
    workspace: str, dumps: dict[str, str | None], skip_bad: bool, stage_fingerprint: str
) -> IngestCategoriesReport:
    ws = Workspace.resolve(workspace)
    write_articles = not _xml_articles_present(ws)
    links = articles = 0
    with (
        SqlCategoryGraph(
            dumps["page"],
            dumps["categorylinks"],
            dumps["linktarget"],
            dumps["redirect"],
            skip_bad=skip_bad,
            work_dir=ws.tmp_dir,
        ) as graph,
        ws.transaction(INGEST_STAGE, fingerprint=stage_fingerprint) as tx,
    ):
        tx.replace_source("category_links", SQL_SOURCE)
        tx.replace_source("articles", SQL_SOURCE)  # also drops SQL articles once an XML dump is in
        writer = tx.writer("category_links", source=SQL_SOURCE)
        for batch in graph.category_links():
            writer.write(_with_source(batch, SQL_SOURCE))
            links += batch.num_rows
        writer.close()
        if write_articles:
            writer = tx.writer("articles", source=SQL_SOURCE)
            for batch in graph.articles():
                writer.write(_with_source(batch, SQL_SOURCE))
                articles += batch.num_rows
            writer.close()
        report = IngestCategoriesReport(dumps=dumps, graph=graph.stats.as_dict(), category_links_written=links,
                                        articles_written=articles, articles_skipped_xml_present=not write_articles)  # fmt: skip
        tx.report = report.ledger()
    return report


@flow(name="ingest-categories")
def ingest_categories_flow(
    page: str,
    categorylinks: str,
    linktarget: str | None = None,
    redirect: str | None = None,
    skip_bad: bool = False,
    workspace: str | None = None,
) -> IngestCategoriesReport:
    """Ingest MediaWiki `page` + `categorylinks` SQL dumps (`linktarget` for the 1.44+ schema,
    `redirect` for redirect targets)."""
    ws = Workspace.resolve(workspace)
    dumps: dict[str, str | None] = {}
    for role, path in (
        ("page", page),
        ("categorylinks", categorylinks),
        ("linktarget", linktarget),
        ("redirect", redirect),
    ):
        resolved = Path(path).expanduser().resolve() if path is not None else None
        if resolved is not None and not resolved.is_file():
            raise FileNotFoundError(f"{role} dump not found: {resolved}")
        dumps[role] = str(resolved) if resolved is not None else None
    params = {"skip_bad": skip_bad, "write_articles": not _xml_articles_present(ws)}
    stage_fp = fingerprint_dumps_task(dumps, params)
    done = finished_report(ws, INGEST_STAGE, stage_fp, IngestCategoriesReport, "category dumps unchanged")
    if done is not None:
        return done
    report = ingest_dumps_task(str(ws.root), dumps, skip_bad, stage_fp)
    log_report("ingest categories", report)
    return report


# -- labelling ------------------------------------------------------------------------------------
def _metric_rows(
    report: CoverageReport, dataset: str | None, config: str, *, questions_only: bool
) -> list[dict]:
    now = datetime.now(timezone.utc)
    rows = []
    for metric, value, group in report.metrics():
        if questions_only != metric.startswith(("question", "labelled_question", "avg_labels")):
            continue
        rows.append(
            {"run": LABEL_SOURCE, "dataset": dataset, "split": None, "metric": metric, "value": value,
             "group": group, "created_at": now, "config": config}
        )  # fmt: skip
    return rows


def _with_domains(part: pa.Table, passage_domains: dict[str, list[str]], order: list[str]) -> pa.Table:
    """A questions part with its `domains` column (re)computed from its positives."""
    index = part.schema.get_field_index("domains")
    column = assign_question_domains(part.column("positive_ids"), passage_domains, order)
    return part.set_column(index, part.schema.field(index), column.cast(part.schema.field(index).type))


def label_workspace(ws: Workspace, config: DomainConfig, stage_fingerprint: str) -> LabelDomainsReport:
    """Label, relabel questions, measure coverage, write it all in one transaction, draw the plot."""
    log = stage_logger()
    if not ws.rows("category_links"):
        raise ValueError(
            "the workspace has no category_links: run `odqa ingest wikipedia` or `odqa ingest categories` first"
        )
    articles = (
        (lambda: ws.scan("articles", ["title", "namespace", "is_redirect", "redirect_target"]))
        if ws.rows("articles")
        else None
    )
    result = label_domains(
        lambda: ws.scan("category_links", ["title", "namespace", "category"], batch_size=1_000_000),
        config,
        articles=articles,
    )
    domains = result.domains
    order = list(config.domains)
    config_text = str(
        {"domains": order, "max_depth": config.max_depth, "hidden_prefixes": list(config.hidden_prefixes)}
    )
    has_passages = ws.rows("passages") > 0

    # Question labels: the union of the domains of each question's positive passages.
    questions = (
        ws.read_table("questions", columns=["question_id", "dataset", "positive_ids"])
        if ws.rows("questions")
        else None
    )
    passage_domains: dict[str, list[str]] = {}
    if questions is not None:
        passages = ws.scan("passages", ["passage_id", "title"]) if has_passages else []
        positives = pc.list_flatten(questions.column("positive_ids"))
        passage_domains = positive_passage_domains(positives, passages, domains, order)
        questions = questions.append_column(
            "domains", assign_question_domains(questions.column("positive_ids"), passage_domains, order)
        )

    overall = coverage_report(
        domains,
        order,
        articles=content_titles(ws),
        passages=ws.scan("passages", ["title"]) if has_passages else None,
        question_labels=questions.select(["question_id", "domains"]) if questions is not None else None,
    )
    metrics = _metric_rows(overall, None, config_text, questions_only=False)
    per_dataset: dict[str, CoverageReport] = {}
    if questions is not None:
        for dataset in sorted({d for d in questions.column("dataset").to_pylist() if d is not None}):
            subset = questions.filter(pc.equal(questions["dataset"], dataset)).select(
                ["question_id", "domains"]
            )
            per_dataset[dataset] = coverage_report(domains.slice(0, 0), order, question_labels=subset)
            metrics += _metric_rows(per_dataset[dataset], dataset, config_text, questions_only=True)

    plot = plot_domain_counts(overall, ws.plot_path(PLOT_NAME), title="Domain labels (DESIRE-ME 4.1)")
    text = overall.format()
    for dataset, r in per_dataset.items():
        text += f"\n{dataset}: labelled questions {r.labelled_questions}/{r.questions}, avg labels {r.avg_labels_per_question:.2f}"
    report = LabelDomainsReport(
        labels={k: v for k, v in result.report.as_dict().items() if k != "per_domain"}, domain_rows=domains.num_rows,
        coverage_figures={k: v for k, v in overall.as_dict().items() if not isinstance(v, dict)},
        questions_labelled_share={d: r.labelled_question_share for d, r in per_dataset.items()}, plot=str(plot),
        coverage=text,
    )  # fmt: skip
    with ws.transaction(LABEL_STAGE, fingerprint=stage_fingerprint) as tx:
        tx.replace_table("domains")
        writer = tx.writer("domains", source=LABEL_SOURCE)
        for batch in domains.to_batches(max_chunksize=500_000):
            writer.write(batch)
        writer.close()
        if questions is not None:
            tx.rewrite("questions", lambda part: _with_domains(part, passage_domains, order))
        tx.replace_source("metrics", LABEL_SOURCE)
        tx.write("metrics", metrics, source=LABEL_SOURCE)
        tx.report = report.ledger()
    log_report("label domains", report)
    log.info("domain labels:\n%s", text)
    return report


@task(name="label-domains")
def label_domains_task(workspace: str, config: dict[str, Any], stage_fingerprint: str) -> LabelDomainsReport:
    return label_workspace(Workspace.resolve(workspace), _config_from_dict(config), stage_fingerprint)


def _config_from_dict(data: dict[str, Any]) -> DomainConfig:
    return DomainConfig(
        domains=tuple(data["domains"]),
        hidden_prefixes=tuple(data["hidden_prefixes"]),
        hidden_categories=frozenset(data["hidden_categories"]),
        hidden_parents=tuple(data["hidden_parents"]),
        max_depth=int(data["max_depth"]),
    )


@flow(name="label-domains")
def label_domains_flow(
    workspace: str | None = None,
    domains_file: str | None = None,
    max_depth: AtLeastOne | None = None,
) -> LabelDomainsReport:
    """Label articles and questions with DESIRE-ME domains from the category graph.

    Args:
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        domains_file: JSON file of top-level domains and their categories; empty: DESIRE-ME's.
        max_depth: Most category edges walked up from a page; empty: the domains file's max_depth,
            else 10.
    """
    ws = Workspace.resolve(workspace)
    config = (load_domain_config(domains_file) if domains_file else DomainConfig()).with_max_depth(max_depth)
    config_dict = {**asdict(config), "hidden_categories": sorted(config.hidden_categories)}
    versions = {t: ws.table_version(t) for t in LABEL_INPUTS}
    stage_fp = fingerprint(LABEL_STAGE, config_dict, versions, positives_fingerprint(ws))
    done = finished_report(ws, LABEL_STAGE, stage_fp, LabelDomainsReport,
                           "links, articles, passages, questions and settings unchanged")  # fmt: skip
    return done or label_domains_task(str(ws.root), config_dict, stage_fp)
