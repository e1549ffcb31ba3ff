"""Prefect flows for question datasets: template questions from facts, PAQ samples, QA imports.

Each flow wires pure steps of `pipelines/questions/` to the workspace:
- `trex_questions_flow`: facts from a SPARQL endpoint (one Prefect task per relation, with
  Prefect retries on top of the client's own backoff), T-REx files or a JSON Lines file ->
  template questions in the thesis' splits (or one split) -> positives from the workspace's
  passages when there are any -> `questions` + report figures in `metrics`.
- `paq_questions_flow`: PAQ metadata -> the thesis' 100K-passage sample (`questions`) and its
  flipped variant (`flipped`).
- `import_questions_flow`: a standard QA file -> `questions` (+ `passages`, `qrels`). A file is
  a source of its own (dataset, split, format, full path): another file adds, the same file with new content
  replaces its rows only with `replace`, question ids stay unique across the workspace.

Every flow fingerprints its inputs and parameters: a re-run with identical inputs is a no-op,
and the rows of a dataset are replaced in one atomic commit, so a failure (a SPARQL endpoint
that stays down, a malformed line) leaves the workspace exactly as it was.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from prefect import flow, task

from ...pipelines.questions.duck import duplicate_ids
from ...pipelines.questions.imports import (
    ImportedDataset,
    ImportFormatError,
    dedupe_passages,
    import_questions,
)
from ...pipelines.questions.jsonstream import MAX_RECORD_BYTES
from ...pipelines.questions.paq import PaqConfig, sample_paq
from ...pipelines.questions.positives import find_positives
from ...pipelines.questions.sparql import DEFAULT_USER_AGENT, SparqlTripleSource
from ...pipelines.questions.splits import (
    THESIS_SEEN_RELATIONS,
    THESIS_UNSEEN_RELATIONS,
    SplitConfig,
    SplitResult,
    single_split,
    thesis_splits,
)
from ...pipelines.questions.templates import load_templates
from ...pipelines.questions.triples import (
    RELATION_ID,
    JsonlTripleSource,
    TrexTripleSource,
    Triple,
    check_relation_id,
)
from ...pipelines.tsv_lines import quoting_fingerprint
from ...storage import Workspace
from ...storage.articles import redirects
from ...storage.choices import (
    ON_DUPLICATE,
    QUESTION_FORMATS,
    OnDuplicate,
    QuestionFormat,
    Quoting,
    TrexSplits,
)
from ...storage.fingerprint import file_sha256, fingerprint
from ...storage.locks import writer_lock
from ...storage.passages import passage_files
from ...storage.reports import Report
from ..plumbing.bounds import AtLeastOne, AtLeastZero, NotNegative, Positive, Seed
from ..plumbing.report_text import log_report
from ..plumbing.runtime import stage_logger
from ..plumbing.skip_unchanged import finished_report

THESIS_RELATIONS = THESIS_SEEN_RELATIONS + THESIS_UNSEEN_RELATIONS
SPARQL_DEFAULT_SAMPLE = 20_000  # 10,000 for the splits (Table 3.1) + leftovers for the analysis sets


@dataclass
class TrexQuestionsReport(Report):
    dataset: str
    facts: int
    questions: int
    splits: dict[str, int]  # questions per split
    skipped: dict[str, int]  # facts left out, by reason
    questions_with_positive: int | None = None
    positives: str | None = None  # why positives were not looked for, when they were not
    analysis_shortfalls: int = 0  # relations with fewer analysis questions than asked for
    spread: ClassVar[dict[str, str]] = {"splits": "split_", "skipped": "skipped_"}


@dataclass
class PaqQuestionsReport(Report):
    dataset: str
    path: str
    sample: dict[str, Any]  # what the sampling read, kept and left out
    spread: ClassVar[dict[str, str]] = {"sample": ""}


@dataclass
class ImportQuestionsReport(Report):
    """What an import did to the questions table: rows added (`questions`), replaced (this
    source's old rows), kept (other sources' rows), skipped (duplicates under --on-duplicate
    keep-existing), total; the passages and qrels the file brought; and the questions added with
    an empty answers list (`[]` in the file: answer-based R@K and distant supervision cannot use
    them, so they are counted rather than passed over in silence)."""

    format: str
    path: str
    dataset: str
    split: str
    questions: int
    questions_with_positive: int
    passages: int = 0
    qrels: int = 0
    replaced: int = 0
    kept: int = 0
    skipped_duplicates: int = 0
    total: int = 0
    questions_without_answers: int = 0

    def as_figures(self) -> dict[str, Any]:
        """The figures, without `skipped_duplicates` and `questions_without_answers` when 0 (the usual case)."""
        figures = super().as_figures()
        for key in ("skipped_duplicates", "questions_without_answers"):
            if not getattr(self, key):
                figures.pop(key, None)
        return figures


def _metric_rows(dataset: str, source: str, figures: list[tuple[str | None, str, float, str | None]],
                 config: dict[str, Any]) -> list[dict[str, Any]]:
    """`metrics` rows (run = the stage source) for (split, metric, value, group) figures."""
    now = datetime.now(timezone.utc)
    text = json.dumps(config, sort_keys=True, default=str)
    return [
        {"run": source, "dataset": dataset, "split": split, "metric": metric, "value": float(value), "group": group,
         "created_at": now, "config": text}
        for split, metric, value, group in figures
    ]


def _files_sha(paths: list[Path]) -> list[tuple[str, str]]:
    return [(p.name, file_sha256(p)) for p in sorted(paths)]


# --- facts -> template questions ------------------------------------------------------------

@task(name="sparql-relation", tags=["sparql"])
def fetch_relation_task(endpoint: str, relation: str, options: dict[str, Any]) -> list[Triple]:
    """One relation's facts; the whole relation is retried by Prefect if the client gives up."""
    return SparqlTripleSource(endpoint, [relation], **options).fetch_relation(relation)


@task(name="read-triples")
def read_triples_task(kind: str, path: str, relations: list[str] | None, sample: int | None, seed: int) -> list[Triple]:
    if kind == "trex":
        source = TrexTripleSource(Path(path), relations, sample, seed)
        triples = source.fetch()
        if source.skipped:
            stage_logger().info("T-REx triples skipped: %s", dict(source.skipped))
        return triples
    return JsonlTripleSource(Path(path), relations, sample, seed).fetch()


def _triples_digest(triples: list[Triple]) -> str:
    return fingerprint([[t.subject, t.relation, t.object, t.subject_id, t.object_id, list(t.object_aliases)]
                        for t in triples])


def _trex_figures(result: SplitResult, positives_report: list[dict[str, Any]] | None) -> list[tuple]:
    figures: list[tuple] = [(row["split"], "questions", row["questions"], row["relation"]) for row in result.counts()]
    totals = Counter(result.questions.column("split").to_pylist())
    figures += [(split, "questions", n, None) for split, n in totals.items()]
    for row in positives_report or []:
        figures.append((row["split"], "questions_with_article", row["with_article"], row["relation"]))
        figures.append((row["split"], "questions_with_positive", row["with_positive"], row["relation"]))
    if positives_report:
        with_positive: Counter[str] = Counter()
        for row in positives_report:
            with_positive[row["split"]] += row["with_positive"]
        figures += [(split, "questions_with_positive", n, None) for split, n in with_positive.items()]
    figures += [(s["split"], "analysis_shortfall", s["wanted"] - s["got"], s["relation"]) for s in result.shortfalls]
    return figures


@flow(name="questions-trex")
def trex_questions_flow(
    templates: str,
    dataset: str,
    sparql: str | None = None,
    trex: str | None = None,
    triples: str | None = None,
    relations: list[str] | None = None,
    sample_per_relation: AtLeastOne | None = None,
    seed: Seed = 0,
    splits: TrexSplits = "thesis",
    split: str | None = None,
    size_per_relation: AtLeastOne | None = 10_000,
    analysis_per_relation: AtLeastZero = 300,
    page_size: AtLeastOne = 1000,
    sparql_retries: AtLeastZero = 5,
    sparql_backoff: NotNegative = 1.0,
    sparql_timeout: Positive = 120.0,
    user_agent: str = DEFAULT_USER_AGENT,
    task_retries: AtLeastZero = 2,
    task_retry_delay: NotNegative = 30.0,
    workspace: str | None = None,
) -> TrexQuestionsReport:
    """Template questions from Wikidata facts (SPARQL, T-REx or JSON Lines) into `questions`.

    Give exactly one fact source: sparql, trex or triples.

    Args:
        templates: relation_query_templates.json (EntityQuestions format) mapping relations to
            question templates.
        dataset: Dataset name the questions are stored under in the `questions` table.
        sparql: SPARQL endpoint URL to read facts from (e.g. https://query.wikidata.org/sparql).
        trex: T-REx JSON file, or a folder of them, to read facts from.
        triples: JSON Lines file of facts, one (subject, relation, object) triple per line.
        relations: Relation ids (e.g. P19) to use; empty: the thesis' 14, or with splits none
            every templated relation.
        sample_per_relation: Facts per relation, deterministic under seed; empty: all from files,
            20000 from SPARQL.
        seed: Seed of fact sampling and of the splits.
        splits: thesis (seen relations 80/10/10, unseen relations 10% test_unseen, four analysis
            sets) or none (every question in one split, named by split).
        split: With splits none: the one split every question goes to.
        size_per_relation: Facts per relation the thesis splits are made of (Table 3.1);
            empty: all of them.
        analysis_per_relation: Questions per relation in each entity-vs-relation analysis set.
        page_size: SPARQL rows per request.
        sparql_retries: SPARQL retries per request (HTTP 429/5xx, timeouts).
        sparql_backoff: Seconds before the first SPARQL retry, doubling each time (at least the
            server's Retry-After).
        sparql_timeout: SPARQL request timeout in seconds.
        user_agent: User-Agent of SPARQL requests; Wikidata asks for one naming the tool and a
            contact.
        task_retries: Prefect retries of a relation's fetch task after its SPARQL retries ran out.
        task_retry_delay: Seconds between those task retries.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
    """
    if sum(x is not None for x in (sparql, trex, triples)) != 1:
        raise ValueError("give exactly one fact source: --sparql URL, --trex DIR or --triples FILE")
    if splits not in ("thesis", "none"):
        raise ValueError(f"--splits must be 'thesis' or 'none', got {splits!r}")
    if splits == "none" and not split:
        raise ValueError("--splits none needs --split NAME (the split every question goes to)")
    if splits == "thesis" and split:
        raise ValueError("--split NAME only goes with --splits none")
    ws = Workspace.resolve(workspace)
    template_file = Path(templates).expanduser().resolve()
    template_map = load_templates(template_file)
    wanted = [check_relation_id(r) for r in relations] if relations else None
    if wanted is None:  # the thesis' 14 relations, or with --splits none every templated relation
        wanted = list(THESIS_RELATIONS) if splits == "thesis" else [k for k in template_map if RELATION_ID.match(k)]
    config = SplitConfig(size_per_relation=size_per_relation, analysis_per_relation=analysis_per_relation, seed=seed)

    if sparql is not None:
        sample = sample_per_relation if sample_per_relation is not None else SPARQL_DEFAULT_SAMPLE
        options = {"sample_per_relation": sample, "seed": seed, "page_size": page_size, "retries": sparql_retries,
                   "backoff": sparql_backoff, "timeout": sparql_timeout, "user_agent": user_agent}
        fetch = fetch_relation_task.with_options(retries=task_retries, retry_delay_seconds=task_retry_delay)
        facts = [t for relation in wanted for t in fetch(sparql, relation, options)]
        origin = {"sparql": sparql, "facts": _triples_digest(facts)}
    else:
        kind, path = ("trex", trex) if trex is not None else ("jsonl", triples)
        source_path = Path(path).expanduser().resolve()
        if not source_path.exists():
            raise FileNotFoundError(f"fact source not found: {source_path}")
        files = sorted(source_path.glob("*.json*")) if source_path.is_dir() else [source_path]
        origin = {kind: _files_sha(files)}
        facts = None
        sample = sample_per_relation

    params = {"dataset": dataset, "relations": wanted, "sample_per_relation": sample, "seed": seed, "splits": splits,
              "split": split, "size_per_relation": size_per_relation, "analysis_per_relation": analysis_per_relation}
    stage = trex_stage(dataset)
    stage_fp = fingerprint(stage, origin, file_sha256(template_file), params,
                           ws.table_version("passages"), ws.table_version("articles"))
    done = finished_report(ws, stage, stage_fp, TrexQuestionsReport, "same facts, templates and parameters")
    if done is not None:
        return done
    if facts is None:
        facts = read_triples_task(kind, str(source_path), wanted, sample, seed)

    if splits == "thesis":
        result = thesis_splits(facts, template_map, dataset, config)
    else:
        result = single_split(facts, template_map, dataset, split)
    questions = result.questions
    positives_report = None
    if ws.rows("passages"):
        found = find_positives(questions, ws.scan("passages", columns=["passage_id", "title", "text"]), redirects(ws))
        questions, positives_report = found.questions, found.report

    source = stage
    report = TrexQuestionsReport(
        dataset=dataset, facts=len(facts), questions=questions.num_rows,
        splits=dict(sorted(Counter(questions.column("split").to_pylist()).items())), skipped=dict(result.skipped),
        questions_with_positive=(sum(r["with_positive"] for r in positives_report)
                                 if positives_report is not None else None),
        positives=None if positives_report is not None else "skipped: the workspace has no passages",
        analysis_shortfalls=len(result.shortfalls),
    )  # fmt: skip
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        for table in ("questions", "metrics"):
            tx.replace_source(table, source)
        tx.write("questions", questions, source=source)
        tx.write("metrics", _metric_rows(dataset, source, _trex_figures(result, positives_report), params), source=source)
        tx.report = report.ledger()
    log_report(stage, report)
    return report


# --- PAQ ------------------------------------------------------------------------------------

@flow(name="questions-paq")
def paq_questions_flow(
    path: str,
    dataset: str = "paq",
    passages: AtLeastOne = 100_000,
    seed: Seed = 0,
    min_questions: AtLeastOne = 3,
    negatives: AtLeastZero = 1,
    memory_limit: str = "1GB",
    workspace: str | None = None,
) -> PaqQuestionsReport:
    """The thesis' PAQ sample (one question for each of N passages, 70/15/15) and its flipped rows."""
    ws = Workspace.resolve(workspace)
    source_path = Path(path).expanduser().resolve()
    if not source_path.is_file():
        raise FileNotFoundError(f"PAQ metadata file not found: {source_path}")
    config = PaqConfig(passages=passages, seed=seed, min_questions=min_questions, negatives=negatives,
                       memory_limit=memory_limit)
    params = {"dataset": dataset, "passages": passages, "seed": seed, "min_questions": min_questions,
              "negatives": negatives, "train": str(config.train_fraction), "dev": str(config.dev_fraction)}
    stage = paq_stage(dataset)
    stage_fp = fingerprint(stage, file_sha256(source_path), params)
    done = finished_report(ws, stage, stage_fp, PaqQuestionsReport, "same file and parameters")
    if done is not None:
        return done
    with ws.scratch("paq") as tmp:
        result = sample_paq(source_path, tmp, dataset, config)
    report = PaqQuestionsReport(dataset=dataset, path=str(source_path), sample=dict(result.report))
    figures = [(None, key, value, None) for key, value in result.report.items()]
    with ws.transaction(stage, fingerprint=stage_fp) as tx:
        for table in ("questions", "flipped", "metrics"):
            tx.replace_source(table, stage)
        tx.write("questions", result.questions, source=stage)
        tx.write("flipped", result.flipped, source=stage)
        tx.write("metrics", _metric_rows(dataset, stage, figures, params), source=stage)
        tx.report = report.ledger()
    log_report(stage, report)
    return report


# --- imports --------------------------------------------------------------------------------

def _import_files(fmt: str, path: Path, split: str) -> list[Path]:
    if fmt == "beir":
        return [path / "corpus.jsonl", path / "queries.jsonl", path / "qrels" / f"{split}.tsv"]
    if path.is_dir():
        return sorted(path.glob("P*.json"))
    return [path]




def trex_stage(dataset: str) -> str:
    """The ledger name of a dataset's template questions."""
    return f"questions-trex:{dataset}"


def paq_stage(dataset: str) -> str:
    """The ledger name of a dataset's PAQ questions."""
    return f"questions-paq:{dataset}"


def question_source(dataset: str, split: str, fmt: str, path: Path) -> str:
    """The `source` of an imported question file: the dataset and split it fills, its format and
    full path. Two files are two sources whatever their names; one file imported under two
    dataset names (a benchmark's variants) is two sources too, since its question ids differ."""
    return f"import-questions:{dataset}:{split}:{fmt}:{path.expanduser().resolve()}"


def _refuse_duplicate_questions(ws: Workspace, staged: list[Path], source: str, source_path: Path) -> None:
    kept = [(ws.root / e.path, e.source) for e in ws.snapshot().files("questions") if e.source != source]
    within, across = duplicate_ids("question_id", staged, kept)
    if within:
        listed = ", ".join(f"{qid!r} ({n} times)" for qid, n in within)
        raise ImportFormatError(f"{source_path}: duplicate question ids within the file: {listed}; a record's id "
                                "(or, without one, its line) must be unique")  # fmt: skip
    if across:
        listed = ", ".join(f"{qid!r} (from {other})" for qid, other in across)
        raise ImportFormatError(
            f"{source_path}: question ids already in the workspace from another source: {listed}. Ids must be "
            "unique across the workspace (formats without ids number their records, so two files of one "
            "--dataset and --split collide); import under another --split or --dataset, or pass "
            "--on-duplicate keep-existing to skip such questions of this file"
        )


@flow(name="import-questions")
def import_questions_flow(
    fmt: QuestionFormat, path: str, dataset: str, split: str, memory_limit: str = "1GB", workspace: str | None = None,
    replace: bool = False, on_duplicate: OnDuplicate = "refuse", max_record_bytes: AtLeastOne = MAX_RECORD_BYTES,
    quoting: Quoting = "csv",
) -> ImportQuestionsReport:  # fmt: skip
    """Import a standard QA dataset file into `questions` (and `passages` / `qrels`).

    A file is a source of its own (dataset, split, format and full path): another file adds
    questions, the same file with new content replaces its rows only when `replace` is set, and
    question ids (and passage ids) stay unique across the workspace.

    Args:
        fmt: Format of the file: dpr-json, dpr-qas, nq-open, entityquestions, squad or beir.
        path: The dataset file (or folder: entityquestions, beir), on the machine the flow runs on.
        dataset: Name the questions get, used as NAME in NAME:SPLIT by train, retrieve and evaluate.
        split: Split the questions get, e.g. train, dev or test.
        memory_limit: DuckDB memory limit while deduplicating the passages the file brings.
        workspace: Workspace folder; empty: $ODQA_WORKSPACE of the worker, else ./workspace.
        replace: Replace the rows an earlier import of this same file (path) brought in.
        on_duplicate: A question id (or a passage id with another text) the workspace already
            holds from another source: refuse (the default, naming both) or keep-existing (keep
            the rows already there and count the skipped ones).
        max_record_bytes: The longest record accepted (a line, a JSON array element, a whole
            SQuAD file); a longer one is refused with its file and line.
        quoting: How a tab-separated line (dpr-qas, beir's qrels) is split: csv (the default)
            reads it as DPR's csv.reader does (a field that starts with a quote is csv-quoted);
            none splits it at tabs only, quotes being text (a file not written with csv quoting).
    """
    if fmt not in QUESTION_FORMATS:
        raise ValueError(f"unknown question format {fmt!r}; expected one of {', '.join(QUESTION_FORMATS)}")
    if on_duplicate not in ON_DUPLICATE:
        raise ValueError(f"unknown --on-duplicate {on_duplicate!r}; expected one of {list(ON_DUPLICATE)}")
    ws = Workspace.resolve(workspace)
    source_path = Path(path).expanduser().resolve()
    imported = import_questions(fmt, source_path, dataset, split, max_record_bytes, quoting)  # validates the path and layout
    source = question_source(dataset, split, fmt, source_path)
    stage = source
    files = [p for p in _import_files(fmt, source_path, split) if p.exists()]
    # One questions import at a time: the duplicate checks must see every commit before their own.
    with writer_lock(ws.root, "table:questions:import", f"the questions table (import of {source_path})"):
        stage_fp = fingerprint(stage, _files_sha(files), on_duplicate, *quoting_fingerprint(quoting))
        done = finished_report(ws, stage, stage_fp, ImportQuestionsReport,
                               f"{source_path} already imported with identical content")  # fmt: skip
        if done is not None:
            return done
        held = sum(e.rows for e in ws.snapshot().files("questions") if e.source == source)
        if held and not replace:
            raise FileExistsError(
                f"{source_path} was imported before with other content or options ({held:,} questions of "
                f"source {source}); pass --replace to replace them with this import's questions"
            )
        report = _import_questions(ws, imported, fmt, source_path, dataset, split, stage_fp, memory_limit,
                                   on_duplicate == "keep-existing")  # fmt: skip
    log_report(source, report)
    return report


def _import_questions(ws: Workspace, imported: ImportedDataset, fmt: str, source_path: Path, dataset: str,
                      split: str, stage_fp: str, memory_limit: str, keep_existing: bool) -> ImportQuestionsReport:  # fmt: skip
    source = question_source(dataset, split, fmt, source_path)
    counts: Counter[str] = Counter()
    existing = None
    if keep_existing:
        others = [ws.root / e.path for e in ws.snapshot().files("questions") if e.source != source]
        ids = [pq.read_table(path, columns=["question_id"]).column("question_id") for path in others]
        existing = pa.chunked_array([c for column in ids for c in column.chunks], pa.string()).combine_chunks()
    with ws.scratch("import-questions") as tmp, ws.transaction(source, fingerprint=stage_fp) as tx:
        for table in ("questions", "passages", "qrels", "metrics"):
            tx.replace_source(table, source)
        writer = tx.writer("questions", source=source, prefix="questions")
        for batch in imported.questions:
            if existing is not None:
                kept_rows = pc.invert(pc.is_in(batch.column("question_id"), value_set=existing))
                counts["skipped_duplicates"] += batch.num_rows
                batch = batch.filter(kept_rows)
                counts["skipped_duplicates"] -= batch.num_rows
            writer.write(batch)
            counts["questions"] += batch.num_rows
            positives = batch.column(batch.schema.get_field_index("positive_ids")).to_pylist()
            counts["questions_with_positive"] += sum(1 for ids in positives if ids)
            if fmt != "beir":  # BEIR judges passages and brings no answers; the others bring them
                answers = batch.column(batch.schema.get_field_index("answers")).to_pylist()
                if without := sum(1 for a in answers if not a):  # (a metrics row only where there are any)
                    counts["questions_without_answers"] += without
        writer.close()
        _refuse_duplicate_questions(ws, tx.staged_files("questions"), source, source_path)
        if imported.passages is not None:
            others = passage_files(ws, except_source=source)
            writer = tx.writer("passages", source=source, prefix="passages")
            for batch in dedupe_passages(imported.passages, tmp, memory_limit, exclude=others,
                                         keep_existing=keep_existing):  # fmt: skip
                writer.write(batch.drop_columns(["source"]).append_column(
                    "source", pa.array([source] * batch.num_rows, pa.string())))  # fmt: skip
                counts["passages"] += batch.num_rows
            writer.close()
        if imported.qrels is not None:
            writer = tx.writer("qrels", source=source, prefix="qrels")
            for batch in imported.qrels:
                writer.write(batch)
                counts["qrels"] += batch.num_rows
            writer.close()
        entries = ws.snapshot().files("questions")
        replaced = sum(e.rows for e in entries if e.source == source)
        kept = sum(e.rows for e in entries if e.source != source)
        report = ImportQuestionsReport(format=fmt, path=str(source_path), dataset=dataset, split=split,
                                       questions=counts["questions"],
                                       questions_with_positive=counts["questions_with_positive"],
                                       passages=counts["passages"], qrels=counts["qrels"], replaced=replaced,
                                       kept=kept, skipped_duplicates=counts["skipped_duplicates"],
                                       questions_without_answers=counts["questions_without_answers"],
                                       total=kept + counts["questions"])  # fmt: skip
        figures = [(split, key, value, None) for key, value in counts.items()]
        tx.write("metrics", _metric_rows(dataset, source, figures, {"format": fmt, "path": str(source_path)}),
                 source=source)  # fmt: skip
        tx.report = report.ledger()
    return report
