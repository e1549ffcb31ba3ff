"""PAQ sampling and the flipped training variant (thesis section 5.1, "PAQ Training"/"Flipped").

PAQ's QA-pair metadata (`PAQ.metadata.jsonl[.gz]`, 65M lines, 16 GB) has one question per
line: `{"question", "answer": [...], "answers": [{"passage_id", "offset", "text", "extractor"},
...], "subsets", "passage_score"}`; each entry of `answers` names a DPR passage the question was
generated from. The thesis groups the questions by passage, drops passages with fewer than 3
questions, samples 100K passages, keeps one question per passage and splits 70K/15K/15K.

Bounded memory for 65M lines: lines are parsed one at a time and flushed in batches of
(passage_id, question, answers) rows to a Parquet file in a caller-given temporary directory;
the grouping, filtering and sampling run in DuckDB with a memory limit and a spill directory
there. Sampling is deterministic: passages are ranked by MD5("seed|passage_id") and the first N
taken; within a passage the question with the smallest MD5("seed|question") is kept. The same
ranking orders the split: the first floor(70%) sampled passages are train, the next floor(15%)
dev, the rest test (exactly 70,000 / 15,000 / 15,000 for N = 100,000).

Flipped variant (one row per sampled passage): `positive_questions` are all distinct questions
generated from the passage (in seeded order), `negative_questions` the kept questions of the
next `negatives` passages of the same split in ranking order, i.e. random other passages of the
split, as in the thesis (no hard negatives). A trainer for the flipped objective encodes the
passage as the "query" side, samples one positive question per epoch from
`positive_questions`, uses `negative_questions` as extra negatives, and the other passages'
positives in the batch as in-batch negatives: DPR's loss with the roles of question and
passage swapped.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...storage.ids import check_passage_id
from ..progress import track
from .duck import duckdb_session, sql_string
from .jsonstream import JsonFormatError, decode_json_line, open_text
from .rows import QUESTION_SCHEMA, question_row, stable_id, table

FLIPPED_SCHEMA = pa.schema(
    [
        ("passage_id", pa.string()),
        ("dataset", pa.string()),
        ("split", pa.string()),
        ("positive_questions", pa.list_(pa.string())),
        ("negative_questions", pa.list_(pa.string())),
    ]
)

_ROW_SCHEMA = pa.schema(
    [
        ("passage_id", pa.string()),
        ("question", pa.string()),
        ("question_hash", pa.int64()),
        ("answers", pa.list_(pa.string())),
    ]
)


@dataclass(frozen=True)
class PaqConfig:
    """The thesis' sampling (defaults) and the resource limits of the external grouping."""

    passages: int = 100_000
    min_questions: int = 3
    seed: int = 0
    train_fraction: Fraction = Fraction(70, 100)
    dev_fraction: Fraction = Fraction(15, 100)
    negatives: int = 1
    batch_rows: int = 200_000
    memory_limit: str = "1GB"
    threads: int = 2


@dataclass
class PaqResult:
    """Sampled questions (questions-table rows), flipped rows and the counts for the report."""

    questions: pa.Table
    flipped: pa.Table
    report: dict[str, int]


def _question_hash(question: str) -> int:
    return int.from_bytes(hashlib.md5(question.encode("utf-8")).digest()[:8], "little", signed=True)


def parse_paq_line(record: Any, where: str) -> tuple[str, list[str], list[str]]:
    """(question, answers, distinct passage ids) of one metadata record, or a positioned error."""
    if not isinstance(record, dict):
        raise JsonFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise JsonFormatError(f"{where}: 'question' must be a non-empty string")
    answer = record.get("answer", [])
    answers = [answer] if isinstance(answer, str) else answer
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise JsonFormatError(f"{where}: 'answer' must be a string or a list of strings, got {answer!r:.100}")
    spans = record.get("answers")
    if not isinstance(spans, list):
        raise JsonFormatError(f"{where}: 'answers' must be a list of {{'passage_id', ...}} objects")
    passage_ids: list[str] = []
    for span in spans:
        if not isinstance(span, dict) or span.get("passage_id") in (None, ""):
            raise JsonFormatError(f"{where}: every entry of 'answers' needs a 'passage_id', got {span!r:.100}")
        pid = check_passage_id(span["passage_id"], f"{where}: answers")
        if pid not in passage_ids:
            passage_ids.append(pid)
    return question, answers, passage_ids


def _rows(path: Path, counts: Counter[str]) -> Iterator[tuple[str, str, int, list[str]]]:
    with open_text(path) as handle:
        for line_no, line in enumerate(track(handle, f"PAQ {path.name}", "lines"), 1):
            if not line.strip():
                continue
            counts["lines"] += 1
            where = f"{path}:{line_no}"
            question, answers, passage_ids = parse_paq_line(decode_json_line(line, path, line_no), where)
            if not passage_ids:
                counts["questions_without_passage"] += 1
                continue
            qhash = _question_hash(question)
            for pid in passage_ids:
                yield pid, question, qhash, answers


def _spill_rows(path: Path, target: Path, batch_rows: int, counts: Counter[str]) -> None:
    """Write every (passage, question) pair to one Parquet file, batch by batch."""
    columns: tuple[list, list, list, list] = ([], [], [], [])
    with pq.ParquetWriter(target, _ROW_SCHEMA) as writer:
        for row in _rows(path, counts):
            for column, value in zip(columns, row, strict=True):
                column.append(value)
            if len(columns[0]) >= batch_rows:
                writer.write_batch(pa.record_batch(list(columns), schema=_ROW_SCHEMA))
                for column in columns:
                    column.clear()
            counts["pairs"] += 1
        if columns[0]:
            writer.write_batch(pa.record_batch(list(columns), schema=_ROW_SCHEMA))


def sample_paq(path: Path, tmp_dir: Path, dataset: str = "paq", config: PaqConfig = PaqConfig()) -> PaqResult:
    """Sample PAQ as in the thesis; returns question rows, flipped rows and counts."""
    path, tmp_dir = Path(path), Path(tmp_dir)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter()
    rows_file = tmp_dir / "paq_pairs.parquet"
    _spill_rows(path, rows_file, config.batch_rows, counts)

    con = duckdb_session(tmp_dir, config.memory_limit, config.threads)
    try:
        con.execute(f"CREATE TEMP VIEW pairs AS SELECT * FROM read_parquet({sql_string(rows_file)})")
        seed = int(config.seed)
        con.execute(
            """
            CREATE TEMP TABLE eligible AS
            SELECT passage_id, md5(? || '|' || passage_id) AS rank_key
            FROM (SELECT passage_id, count(DISTINCT question_hash) AS n FROM pairs GROUP BY passage_id)
            WHERE n >= ?
            """,
            [str(seed), int(config.min_questions)],
        )
        counts["passages"] = con.execute("SELECT count(DISTINCT passage_id) FROM pairs").fetchone()[0]
        counts["eligible_passages"] = con.execute("SELECT count(*) FROM eligible").fetchone()[0]
        con.execute(
            """
            CREATE TEMP TABLE sampled AS
            SELECT passage_id, row_number() OVER (ORDER BY rank_key, passage_id) - 1 AS rank
            FROM (SELECT * FROM eligible ORDER BY rank_key, passage_id LIMIT ?)
            """,
            [int(config.passages)],
        )
        n = con.execute("SELECT count(*) FROM sampled").fetchone()[0]
        n_train, n_dev = int(n * config.train_fraction), int(n * config.dev_fraction)
        con.execute(
            """
            CREATE TEMP TABLE sampled_questions AS
            SELECT s.passage_id, s.rank,
                   CASE WHEN s.rank < ? THEN 'train' WHEN s.rank < ? THEN 'dev' ELSE 'test' END AS split,
                   p.question, p.answers, md5(? || '|' || p.question) AS question_key
            FROM sampled s JOIN pairs p USING (passage_id)
            """,
            [n_train, n_train + n_dev, str(seed)],
        )
        chosen = con.execute(
            """
            SELECT passage_id, split, question, answers FROM sampled_questions
            QUALIFY row_number() OVER (PARTITION BY passage_id ORDER BY question_key, question,
                                       array_to_string(answers, chr(31))) = 1
            ORDER BY rank
            """
        ).fetchall()
        grouped = con.execute(
            """
            SELECT passage_id, split, list(DISTINCT question) AS questions
            FROM sampled_questions GROUP BY passage_id, split
            """
        ).fetchall()
    finally:
        con.close()
        rows_file.unlink(missing_ok=True)

    questions = [
        question_row(
            question_id=stable_id(dataset, passage_id, question),
            dataset=dataset,
            split=split,
            question=question,
            answers=answers,
            positive_ids=[passage_id],
        )
        for passage_id, split, question, answers in chosen
    ]
    for split in ("train", "dev", "test"):
        counts[f"sampled_{split}"] = sum(1 for q in questions if q["split"] == split)
    counts["sampled_passages"] = len(questions)
    flipped = _flipped(dataset, chosen, grouped, config)
    return PaqResult(table(questions, QUESTION_SCHEMA), flipped, dict(counts))


def _flipped(
    dataset: str, chosen: list[tuple], grouped: list[tuple], config: PaqConfig
) -> pa.Table:
    """Flipped rows: a passage's questions as positives, other passages' questions as negatives."""
    seed = int(config.seed)
    questions_of = {
        pid: sorted(qs, key=lambda q: (hashlib.md5(f"{seed}|{q}".encode()).hexdigest(), q))
        for pid, _, qs in grouped
    }
    by_split: dict[str, list[tuple[str, str]]] = {}
    for passage_id, split, question, _ in chosen:  # `chosen` is in ranking order
        by_split.setdefault(split, []).append((passage_id, question))
    rows = []
    for split, members in by_split.items():
        for i, (passage_id, _) in enumerate(members):
            positives = set(questions_of[passage_id])
            negatives: list[str] = []
            for j in range(1, len(members)):  # a shared question is never a negative of its own passage
                if len(negatives) == config.negatives:
                    break
                candidate = members[(i + j) % len(members)][1]
                if candidate not in positives and candidate not in negatives:
                    negatives.append(candidate)
            rows.append(
                {
                    "passage_id": passage_id,
                    "dataset": dataset,
                    "split": split,
                    "positive_questions": questions_of[passage_id],
                    "negative_questions": negatives,
                }
            )
    return table(rows, FLIPPED_SCHEMA)
