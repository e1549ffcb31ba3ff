"""A dataset split in BEIR's layout: corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv.

BEIR's `GenericDataLoader`, MTEB's custom retrieval tasks and pyserini's BEIR tools read this
layout. The relevance judgments are those `odqa evaluate` scores against (the split's `qrels` rows,
else its questions' `positive_ids` with score 1), so a run evaluated on the exported qrels sees the
same judgments.
Every file is written to a temporary name and renamed, so an interrupted export never looks
complete.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from ..storage.atomic import atomic_text_file

QRELS_HEADER = "query-id\tcorpus-id\tscore"


def write_beir_corpus(batches: Iterable[pa.RecordBatch], out: Path) -> int:
    """`{"_id", "title", "text"}` per line; returns the passages written."""
    count = 0
    with atomic_text_file(out) as handle:
        for batch in batches:
            for pid, title, text in zip(batch.column("passage_id").to_pylist(), batch.column("title").to_pylist(),
                                        batch.column("text").to_pylist(), strict=True):  # fmt: skip
                handle.write(json.dumps({"_id": pid, "title": title or "", "text": text or ""}, ensure_ascii=False))
                handle.write("\n")
                count += 1
    return count


def write_beir_queries(questions: pa.Table, out: Path) -> int:
    """`{"_id", "text"}` per question (and its answers under `metadata`, as BEIR's NQ keeps them)."""
    with atomic_text_file(out) as handle:
        for row in questions.select(["question_id", "question", "answers"]).to_pylist():
            record = {"_id": row["question_id"], "text": row["question"],
                      "metadata": {"answers": list(row["answers"] or [])}}  # fmt: skip
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return questions.num_rows


def write_beir_qrels(judgments: Mapping[str, Mapping[str, int]], question_ids: Sequence[str],
                     out: Path) -> tuple[int, int]:  # fmt: skip
    """One `query-id corpus-id score` row per judged passage of each of `question_ids` (the
    exported queries: BEIR's loader fails on a judged query it does not have); returns (rows,
    questions judged)."""
    rows = judged = 0
    with atomic_text_file(out) as handle:
        handle.write(QRELS_HEADER + "\n")
        for qid in question_ids:
            found = judgments.get(qid, {})
            for pid, score in found.items():
                handle.write(f"{qid}\t{pid}\t{score}\n")
            rows += len(found)
            judged += bool(found)
    return rows, judged
