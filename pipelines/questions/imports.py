"""Standard QA datasets in their published formats, as `questions` / `passages` / `qrels` rows.

Formats (what the papers' data ships as):
- `dpr-json`: DPR retriever training files (biencoder-nq-train.json ...): one JSON array of
  {"question", "answers", "positive_ctxs", "negative_ctxs", "hard_negative_ctxs"}, each context
  {"title", "text", "passage_id", "score", ...}. Streamed element by element (the NQ file is
  ~8 GB). Positive and hard-negative context ids become `positive_ids` / `hard_negative_ids`,
  and every context becomes a passages row (DPR's psgs_w100 ids, so they coincide with an
  imported DPR Wikipedia). A context without an id gets "dpr:" + a hash of title and text.
- `dpr-qas`: DPR's evaluation files (nq-test.qa.csv, trivia-test.qa.csv, curatedtrec-test.qa.csv
  ...): tab-separated `question<TAB>["answer", ...]`, answers a JSON or Python list literal; each
  line read into the fields DPR's `csv.reader(f, delimiter="\t")` reads (`tsv_lines`), or with
  `quoting="none"` split at tabs only.
- `nq-open`: JSON Lines {"question", "answer": [...]} (Lee et al. 2019; also PAQ's copies).
- `entityquestions`: EntityQuestions' `P19.dev.json` files, [{"question", "answers"}]; the
  relation is taken from the file name; a directory imports every P*.json in it.
- `squad`: SQuAD v1.1 JSON; every paragraph becomes a passage ("<dataset>:<article>-<para>")
  and is the positive of its questions; answers are the distinct answers[].text.
- `beir`: a BEIR dataset folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv (header line,
  then query-id, corpus-id, score). Questions are the queries judged in that split (answers
  empty; BEIR judges passages, not answer strings), qrels rows keep the graded relevance, and
  passages with relevance > 0 are the positives. Corpus ids are prefixed "<dataset>:" because
  BEIR ids ("0", "4983") would collide with other corpora in the shared passages table.

question_id is stable: a hash of dataset, split and the record's own id, or its ordinal in the
file when the format has no ids. Every bad record raises an error naming the file and the line
(or, for JSON arrays, the element): a quote left open (a record never continues on the next
line), bytes that are not UTF-8, a string that is not text (an unpaired surrogate), a record over
``max_record_bytes`` (`jsonstream.MAX_RECORD_BYTES`). docs/interop.md states, format by format,
how this reading compares with the loader the format comes from.

Results are re-iterable streams of Arrow record batches, so big files never sit in memory and
the questions and passages of one file can be consumed one after the other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ...storage.choices import QUESTION_FORMATS
from ...storage.ids import check_passage_id, check_question_id
from ..tsv_lines import TSV_QUESTION_FORMATS, Quoting, TsvLineError, check_quoting, tsv_fields
from .duck import duckdb_session, sql_string
from .jsonstream import (
    BOM,
    MAX_RECORD_BYTES,
    JsonFormatError,
    decoded_text,
    iter_json_array,
    iter_json_lines,
    open_binary,
    read_lines,
    refuse_bom,
    refuse_unpaired_surrogates,
    title_text,
    too_deep,
)
from .python_literals import literal_eval
from .rows import (
    PASSAGE_SCHEMA,
    QREL_SCHEMA,
    QUESTION_SCHEMA,
    question_row,
    stable_id,
    unique_in_order,
)

BATCH_ROWS = 10_000
_EQ_FILE = re.compile(r"^(P\d+)\.[^.]+\.json$")


class ImportFormatError(ValueError):
    """A dataset file that does not match its format, naming file and line/element."""


class Batches:
    """A re-iterable stream of record batches: each iteration re-reads the source.

    `empty`: the error for a source without a single record (a question file of none is refused,
    as an empty passages file is: an import that reads nothing is a wrong file or format, and a
    report of `questions: 0` would go unnoticed); None where no record is fine (a file's contexts).
    """

    def __init__(self, produce: Callable[[], Iterator[dict[str, Any]]], schema: pa.Schema,
                 empty: str | None = None) -> None:  # fmt: skip
        self._produce = produce
        self.schema = schema
        self._empty = empty

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.batches(BATCH_ROWS)

    def batches(self, size: int) -> Iterator[pa.RecordBatch]:
        """The stream in batches of ``size`` records (a small first batch checks a file's head)."""
        rows: list[dict[str, Any]] = []
        produced = False
        try:
            for row in self._produce():
                rows.append(row)
                produced = True
                if len(rows) >= size:
                    yield pa.RecordBatch.from_pylist(rows, schema=self.schema)
                    rows = []
        except JsonFormatError as exc:
            raise ImportFormatError(str(exc)) from None
        if not produced and self._empty is not None:
            raise ImportFormatError(self._empty)
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=self.schema)

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self), schema=self.schema)


@dataclass
class ImportedDataset:
    """What one import produces; passages / qrels are None for formats that carry none."""

    questions: Batches
    passages: Batches | None = None
    qrels: Batches | None = None


def _no_questions(path: Path, why: str) -> str:
    """The refusal of a question source without a single question (`Batches`' `empty`)."""
    return (f"{path}: no questions ({why}); a question import must bring at least one: "
            "is this the right file and --format?")  # fmt: skip


def _answers(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ImportFormatError(f"{where}: answers must be a list of strings, got {value!r:.100}")
    return unique_in_order(value)


def _question(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ImportFormatError(f"{where}: question must be a non-empty string, got {value!r:.100}")
    return value


# --- dpr-json -------------------------------------------------------------------------------

def _context_id(ctx: Mapping[str, Any], where: str) -> str:
    """A context's passage id (`passage_id`, else `psg_id`, else `id`), checked against the
    passage-id rule; a context without one gets "dpr:" + a hash of its title and text."""
    for key in ("passage_id", "psg_id", "id"):
        value = ctx.get(key)
        if value is not None and value != "":
            return check_passage_id(value, f"{where}.{key}")
    return "dpr:" + stable_id(str(ctx.get("title", "")), str(ctx.get("text", "")))


def _contexts(record: Mapping[str, Any], key: str, where: str) -> Iterator[tuple[Mapping[str, Any], str]]:
    """(context, where it is: `element N, KEY[i]`) of each context under `key`."""
    value = record.get(key, [])
    if not isinstance(value, list) or not all(isinstance(c, dict) and isinstance(c.get("text"), str) for c in value):
        raise ImportFormatError(f"{where}: {key} must be a list of {{'title', 'text', 'passage_id'}} objects")
    return ((ctx, f"{where}, {key}[{i}]") for i, ctx in enumerate(value))


def _native_id(record: Mapping[str, Any], keys: tuple[str, ...], fallback: object, where: str) -> str:
    """A record's own id under the first of `keys` it has (a JSON string or integer), else `fallback`."""
    for key in keys:
        if record.get(key) is not None:
            return check_question_id(record[key], f"{where}.{key}")
    return str(fallback)


def import_dpr_json(path: Path, dataset: str, split: str, max_bytes: int = MAX_RECORD_BYTES) -> ImportedDataset:
    path = Path(path)

    def records() -> Iterator[tuple[str, int, dict[str, Any]]]:
        for index, record in enumerate(iter_json_array(path, max_bytes)):
            where = f"{path}: element {index}"
            if not isinstance(record, dict):
                raise ImportFormatError(f"{where}: expected a JSON object")
            yield where, index, record

    def questions() -> Iterator[dict[str, Any]]:
        for where, index, record in records():
            yield question_row(
                question_id=stable_id(dataset, split, _native_id(record, ("question_id", "id"), index, where)),
                dataset=dataset,
                split=split,
                question=_question(record.get("question"), where),
                answers=_answers(record.get("answers"), where),
                positive_ids=unique_in_order(_context_id(c, at) for c, at in _contexts(record, "positive_ctxs", where)),
                hard_negative_ids=unique_in_order(
                    _context_id(c, at) for c, at in _contexts(record, "hard_negative_ctxs", where)
                ),
            )

    def passages() -> Iterator[dict[str, Any]]:
        for where, _, record in records():
            for key in ("positive_ctxs", "negative_ctxs", "hard_negative_ctxs"):
                for ctx, at in _contexts(record, key, where):
                    title = title_text(ctx.get("title"), at)
                    yield _passage(_context_id(ctx, at), title, ctx["text"], f"dpr-json:{path.name}")

    return ImportedDataset(Batches(questions, QUESTION_SCHEMA, _no_questions(path, "its JSON array is empty")),
                           Batches(passages, PASSAGE_SCHEMA))


def _passage(passage_id: str, title: str, text: str, source: str) -> dict[str, Any]:
    return {
        "passage_id": passage_id,
        "article_id": None,
        "title": title,
        "text": text,
        "position": None,
        "source": source,
    }


# --- dpr-qas --------------------------------------------------------------------------------

def _literal_list(text: str, where: str) -> list[str]:
    """DPR writes answer lists as JSON or Python literals (['a', "b's"]); both are accepted. JSON is
    read first: the two differ only where JSON is the file's (\\/, a surrogate pair's escapes)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise too_deep(where) from None
    except json.JSONDecodeError:
        try:
            value = literal_eval(text)
        except RecursionError:
            raise too_deep(where) from None
        except (ValueError, SyntaxError):
            raise ImportFormatError(f"{where}: answers column is not a list literal: {text!r:.100}") from None
    refuse_unpaired_surrogates(value, where, "answers")
    return _answers(value, where)


def _tsv_fields(line: str, where: str, quoting: Quoting) -> list[str]:
    """The tab-separated fields of one line as DPR's csv.reader reads them (`tsv_lines`); a record
    never continues on the next line, so a quote left open is refused instead of merging the rows
    after it."""
    try:
        return tsv_fields(line, quoting)
    except TsvLineError as exc:
        raise ImportFormatError(f"{where}: {exc}") from None


def import_dpr_qas(path: Path, dataset: str, split: str, max_bytes: int = MAX_RECORD_BYTES,
                   quoting: Quoting = "csv") -> ImportedDataset:  # fmt: skip
    path = Path(path)

    def questions() -> Iterator[dict[str, Any]]:
        for line_no, line in read_lines(path, max_bytes):
            where = f"{path}:{line_no}"
            row = _tsv_fields(line.removeprefix(BOM) if line_no == 1 else line, where, quoting)
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) not in (2, 3):
                raise ImportFormatError(f"{where}: expected question<TAB>[answers] (and an optional id), found "
                                        f"{len(row)} tab-separated field(s)")  # fmt: skip
            native = row[2] if len(row) > 2 and row[2] else str(line_no)
            yield question_row(
                question_id=stable_id(dataset, split, native),
                dataset=dataset,
                split=split,
                question=_question(row[0], where),
                answers=_literal_list(row[1], where),
            )

    return ImportedDataset(Batches(questions, QUESTION_SCHEMA, _no_questions(path, "no line holds a question")))


# --- nq-open --------------------------------------------------------------------------------

def import_nq_open(path: Path, dataset: str, split: str, max_bytes: int = MAX_RECORD_BYTES) -> ImportedDataset:
    path = Path(path)

    def questions() -> Iterator[dict[str, Any]]:
        for line_no, record in iter_json_lines(path, max_bytes):
            where = f"{path}:{line_no}"
            if not isinstance(record, dict):
                raise ImportFormatError(f"{where}: expected a JSON object")
            answer = record.get("answer", record.get("answers"))
            yield question_row(
                question_id=stable_id(dataset, split, _native_id(record, ("id", "question_id"), line_no, where)),
                dataset=dataset,
                split=split,
                question=_question(record.get("question"), where),
                answers=_answers([answer] if isinstance(answer, str) else answer, where),
            )

    return ImportedDataset(Batches(questions, QUESTION_SCHEMA, _no_questions(path, "no line holds a question")))


# --- entityquestions ------------------------------------------------------------------------

def import_entityquestions(path: Path, dataset: str, split: str, max_bytes: int = MAX_RECORD_BYTES) -> ImportedDataset:
    path = Path(path)
    files = sorted(p for p in path.glob("P*.json") if _EQ_FILE.match(p.name)) if path.is_dir() else [path]
    if not files:
        raise ImportFormatError(f"{path}: no EntityQuestions files named like P19.dev.json")
    for file in files:
        if not _EQ_FILE.match(file.name):
            raise ImportFormatError(f"{file}: EntityQuestions file names look like P19.dev.json (relation first)")
        if not file.is_file():  # else open() fails with a bare "[Errno 21]" or "[Errno 40]"
            raise ImportFormatError(f"{file}: not a file (a folder, or a link that leads to none: broken or a loop); "
                                    "every P*.json of an EntityQuestions folder is read as a JSON file")  # fmt: skip

    def questions() -> Iterator[dict[str, Any]]:
        for file in files:
            relation = _EQ_FILE.match(file.name).group(1)
            for index, record in enumerate(iter_json_array(file, max_bytes)):
                where = f"{file}: element {index}"
                if not isinstance(record, dict):
                    raise ImportFormatError(f"{where}: expected a JSON object")
                yield question_row(
                    question_id=stable_id(dataset, split, relation, str(index)),
                    dataset=dataset,
                    split=split,
                    question=_question(record.get("question"), where),
                    answers=_answers(record.get("answers"), where),
                    relation=relation,
                )

    return ImportedDataset(Batches(questions, QUESTION_SCHEMA, _no_questions(path, "its JSON arrays are empty")))


# --- squad ----------------------------------------------------------------------------------

def _squad_paragraphs(path: Path, dataset: str, max_bytes: int) -> Iterator[tuple[str, str, str, dict[str, Any], str]]:
    """(passage_id, title, context, paragraph, where) for every paragraph of a SQuAD file."""
    with open_binary(path) as handle:
        raw = handle.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise ImportFormatError(f"{path}: a SQuAD file is one JSON document, and this one is longer than "
                                f"{max_bytes:,} bytes, the import limit (--max-record-bytes)")  # fmt: skip
    try:
        text = raw.decode("utf-8")
        refuse_bom(text, path)
        data = decoded_text(text, json.loads(text), str(path))
    except RecursionError:
        raise too_deep(str(path)) from None
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ImportFormatError(f"{path}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x}); question files must "
                                "be UTF-8") from None  # fmt: skip
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except JsonFormatError as exc:
        raise ImportFormatError(str(exc)) from None
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise ImportFormatError(f"{path}: expected SQuAD JSON with a top-level 'data' list")
    for a, article in enumerate(articles):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise ImportFormatError(f"{path}: data[{a}] needs a 'paragraphs' list")
        try:
            title = title_text(article.get("title"), f"{path}: data[{a}]")
        except JsonFormatError as exc:
            raise ImportFormatError(str(exc)) from None
        for p, paragraph in enumerate(paragraphs):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str):
                raise ImportFormatError(f"{where}: needs a 'context' string")
            passage_id = check_passage_id(f"{dataset}:{a}-{p}", f"{where} (named after --dataset)")
            yield passage_id, title.replace("_", " "), paragraph["context"], paragraph, where


def import_squad(path: Path, dataset: str, split: str, max_bytes: int = MAX_RECORD_BYTES) -> ImportedDataset:
    path = Path(path)

    def questions() -> Iterator[dict[str, Any]]:
        for passage_id, _, _, paragraph, where in _squad_paragraphs(path, dataset, max_bytes):
            for q, qa in enumerate(paragraph.get("qas", [])):
                here = f"{where}.qas[{q}]"
                spans = qa.get("answers") if isinstance(qa, dict) else None
                if not isinstance(spans, list) or not all(isinstance(s, dict) and isinstance(s.get("text"), str) for s in spans):
                    raise ImportFormatError(f"{here}: answers must be a list of {{'text', 'answer_start'}}")
                yield question_row(
                    question_id=stable_id(dataset, split, _native_id(qa, ("id",), f"{passage_id}/{q}", here)),
                    dataset=dataset,
                    split=split,
                    question=_question(qa.get("question"), here),
                    answers=unique_in_order(s["text"] for s in spans),
                    positive_ids=[passage_id],
                )

    def passages() -> Iterator[dict[str, Any]]:
        for passage_id, title, context, _, _ in _squad_paragraphs(path, dataset, max_bytes):
            yield _passage(passage_id, title, context, f"squad:{path.name}")

    return ImportedDataset(Batches(questions, QUESTION_SCHEMA, _no_questions(path, "no paragraph has a question")),
                           Batches(passages, PASSAGE_SCHEMA))


# --- beir -----------------------------------------------------------------------------------

def _beir_passage_id(dataset: str, corpus_id: object, where: str) -> str:
    """A BEIR corpus id as the workspace's passage id `<dataset>:<id>`; both checked by the rule."""
    return check_passage_id(f"{dataset}:{check_passage_id(corpus_id, where)}", f"{where} (with --dataset {dataset!r})")


def _beir_qrels(path: Path, max_bytes: int, quoting: Quoting) -> Iterator[tuple[str, str, int, str]]:
    """(query id, corpus id, score, where) of each judgement. BEIR skips the first line whatever it
    holds; odqa requires it to be the header, so that a file without one loses no judgement."""
    lines = read_lines(path, max_bytes)
    first = next(lines, None)
    header = _tsv_fields(first[1].removeprefix(BOM), f"{path}:1", quoting) if first is not None else None
    if header is None or [h.strip() for h in header[:2]] != ["query-id", "corpus-id"]:
        raise ImportFormatError(f"{path}:1: expected the header 'query-id<TAB>corpus-id<TAB>score' (BEIR skips the "
                                "first line, so a file without it would lose its first judgement)")  # fmt: skip
    for line_no, line in lines:
        where = f"{path}:{line_no}"
        row = _tsv_fields(line, where, quoting)
        if not row:
            continue
        try:
            yield row[0], row[1], int(row[2]), where
        except (IndexError, ValueError):
            raise ImportFormatError(f"{where}: expected query-id<TAB>corpus-id<TAB>integer score, got {row!r:.100}") from None


def import_beir(path: Path, dataset: str, split: str, max_bytes: int = MAX_RECORD_BYTES,
                quoting: Quoting = "csv") -> ImportedDataset:  # fmt: skip
    folder = Path(path)
    qrels_file = folder / "qrels" / f"{split}.tsv"
    for needed in (folder / "corpus.jsonl", folder / "queries.jsonl", qrels_file):
        if not needed.exists():
            raise ImportFormatError(f"{folder}: BEIR dataset has no {needed.relative_to(folder)}")

    def judged() -> tuple[dict[str, list[tuple[str, int]]], dict[str, str]]:
        """Each judged query's (passage id, score) pairs, and where it is first judged."""
        by_query: dict[str, list[tuple[str, int]]] = {}
        first: dict[str, str] = {}
        for query_id, corpus_id, score, where in _beir_qrels(qrels_file, max_bytes, quoting):
            by_query.setdefault(query_id, []).append((_beir_passage_id(dataset, corpus_id, where), score))
            first.setdefault(query_id, where)
        return by_query, first

    def questions() -> Iterator[dict[str, Any]]:
        by_query, first = judged()
        found: set[str] = set()
        for line_no, record in iter_json_lines(folder / "queries.jsonl", max_bytes):
            where = f"{folder / 'queries.jsonl'}:{line_no}"
            if not isinstance(record, dict) or "_id" not in record:
                raise ImportFormatError(f"{where}: expected an object with '_id' and 'text'")
            query_id = check_question_id(record["_id"], f"{where}: _id")
            if query_id not in by_query:
                continue
            found.add(query_id)
            yield question_row(
                question_id=stable_id(dataset, split, query_id),
                dataset=dataset,
                split=split,
                question=_question(record.get("text"), where),
                answers=[],
                positive_ids=[passage_id for passage_id, score in by_query[query_id] if score > 0],
            )
        missing = [query_id for query_id in by_query if query_id not in found]
        if missing:  # BEIR's loader stops here with a KeyError
            raise ImportFormatError(f"{first[missing[0]]}: a query id that queries.jsonl does not hold ({len(missing):,} "
                                    f"such quer{'ies' if len(missing) > 1 else 'y'} in {qrels_file.name}); "
                                    "every judged query must be in queries.jsonl")  # fmt: skip

    def qrels() -> Iterator[dict[str, Any]]:
        for query_id, corpus_id, score, where in _beir_qrels(qrels_file, max_bytes, quoting):
            yield {
                "dataset": dataset,
                "split": split,
                "question_id": stable_id(dataset, split, query_id),
                "passage_id": _beir_passage_id(dataset, corpus_id, where),
                "relevance": score,
            }

    def passages() -> Iterator[dict[str, Any]]:
        corpus = folder / "corpus.jsonl"
        for line_no, record in iter_json_lines(corpus, max_bytes):
            where = f"{corpus}:{line_no}"
            if not isinstance(record, dict) or "_id" not in record or not isinstance(record.get("text"), str):
                raise ImportFormatError(f"{where}: expected an object with '_id', 'title' and 'text'")
            passage_id = _beir_passage_id(dataset, record["_id"], f"{where}: _id")
            yield _passage(passage_id, title_text(record.get("title"), where), record["text"], f"beir:{folder.name}")

    return ImportedDataset(
        Batches(questions, QUESTION_SCHEMA, _no_questions(folder, f"no query of queries.jsonl is judged in qrels/{split}.tsv")),
        Batches(passages, PASSAGE_SCHEMA),
        Batches(qrels, QREL_SCHEMA),
    )


# The formats that read a folder: every P*.json of an EntityQuestions split, a BEIR dataset.
FOLDER_FORMATS = ("entityquestions", "beir")

IMPORTERS: dict[str, Callable[[Path, str, str, int], ImportedDataset]] = {
    "dpr-json": import_dpr_json,
    "dpr-qas": import_dpr_qas,
    "nq-open": import_nq_open,
    "entityquestions": import_entityquestions,
    "squad": import_squad,
    "beir": import_beir,
}


def import_questions(fmt: str, path: Path, dataset: str, split: str, max_record_bytes: int = MAX_RECORD_BYTES,
                     quoting: Quoting = "csv") -> ImportedDataset:  # fmt: skip
    """Dispatch on the format name (one of QUESTION_FORMATS); records over ``max_record_bytes`` are refused.
    `quoting` (`tsv_lines`) applies to the tab-separated files (TSV_QUESTION_FORMATS)."""
    try:
        importer = IMPORTERS[fmt]
    except KeyError:
        raise ValueError(f"unknown question format {fmt!r}; expected one of {', '.join(QUESTION_FORMATS)}") from None
    if check_quoting(quoting, fmt, TSV_QUESTION_FORMATS) != "csv":
        importer = partial(importer, quoting=quoting)
    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if Path(path).is_dir() and fmt not in FOLDER_FORMATS:  # else open() fails with a bare "[Errno 21]"
        raise ImportFormatError(f"{path}: a folder, but the {fmt} format reads one file (a folder is read by "
                                f"{' and '.join(FOLDER_FORMATS)}); give the file's path")  # fmt: skip
    if not Path(path).is_dir() and fmt == "beir":
        raise ImportFormatError(f"{path}: a file, but the beir format reads a dataset folder (corpus.jsonl, "
                                "queries.jsonl, qrels/SPLIT.tsv); give the folder's path")  # fmt: skip
    return importer(Path(path), dataset, split, max_record_bytes)


def dedupe_passages(
    batches: Iterable[pa.RecordBatch],
    tmp_dir: Path,
    memory_limit: str = "1GB",
    exclude: Sequence[Path] = (),
    keep_existing: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Passages with each passage_id once (the first text seen), through DuckDB on disk.

    DPR training files repeat the same context under many questions (millions of contexts in
    nq-train), so the distinct set is computed out of core: batches go to a Parquet file in
    `tmp_dir` and DuckDB, with a memory limit and a spill directory there, keeps the first row
    of every id. Ids found in the `exclude` Parquet files (passages of other sources; e.g. an
    already imported psgs_w100, whose ids DPR's contexts use) are that same passage and are not
    added again. An id whose text differs (within the file, or from the workspace's passage of
    that id: two SQuAD files number their paragraphs alike) is a different passage: refused,
    naming both sources, unless `keep_existing` (then the workspace's row stays). Rows come back
    ordered by passage_id.
    """
    tmp_dir = Path(tmp_dir)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    spill = tmp_dir / "passages_to_dedupe.parquet"
    with pq.ParquetWriter(spill, PASSAGE_SCHEMA) as writer:
        for batch in batches:
            writer.write_batch(batch)
    con = duckdb_session(tmp_dir, memory_limit)
    try:
        new = f"read_parquet({sql_string(spill)})"
        clash = con.sql(f"SELECT passage_id, any_value(source) FROM {new} GROUP BY 1 "
                        "HAVING count(DISTINCT text) > 1 ORDER BY 1 LIMIT 3").fetchall()  # fmt: skip
        if clash:
            raise ImportFormatError(f"{clash[0][1]}: passage ids with two different texts in this file: "
                                    f"{', '.join(repr(row[0]) for row in clash)}; ids must name one passage")  # fmt: skip
        known = ""
        if exclude:
            files = ", ".join(sql_string(p) for p in exclude)
            old = f"read_parquet([{files}])"
            if not keep_existing:
                _refuse_other_texts(con, new, old)
            known = f"WHERE passage_id NOT IN (SELECT passage_id FROM {old})"
        reader = con.sql(
            f"""
            SELECT * EXCLUDE (file_row_number)
            FROM read_parquet({sql_string(spill)}, file_row_number = true)
            {known}
            QUALIFY row_number() OVER (PARTITION BY passage_id ORDER BY file_row_number) = 1
            ORDER BY passage_id
            """
        ).fetch_arrow_reader(BATCH_ROWS)
        for batch in reader:
            yield pa.RecordBatch.from_arrays(batch.columns, schema=PASSAGE_SCHEMA)
    finally:
        con.close()
        spill.unlink(missing_ok=True)


def _refuse_other_texts(con: duckdb.DuckDBPyConnection, new: str, old: str) -> None:
    """Refuse the import when a passage id it brings is held by another source with another text."""
    rows = con.sql(f"SELECT n.passage_id, any_value(n.source), any_value(o.source) FROM {new} n JOIN {old} o "
                   "USING (passage_id) WHERE n.text <> o.text GROUP BY 1 ORDER BY 1 LIMIT 3").fetchall()  # fmt: skip
    if rows:
        listed = ", ".join(f"{pid!r} (from {theirs})" for pid, _, theirs in rows)
        raise ImportFormatError(
            f"{rows[0][1]}: passage ids the workspace holds with another text: {listed}. A passage id names one "
            "passage across the workspace; import under another --dataset, or pass --on-duplicate keep-existing "
            "to keep the workspace's passages"
        )
