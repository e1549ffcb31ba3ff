"""The head of a file an import is given, read with the import's own readers before any work
starts: `odqa import ...` runs these before it starts its Prefect server.

A file refused at its first records (a wrong `--format`, a header where none belongs, a stray
quote on line 1, a folder without the files its format needs) is refused at once, without a
server started for a flow that would fail at its first line. Each check runs the very reader and
path rule the import flow runs, on the first `HEAD_RECORDS` records only (a file that short is
read whole); the flow then reads the whole file, so a refusal further in comes from the flow.
Nothing here imports Prefect, so a refusal costs the readers' imports alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pyarrow as pa

from .passage_formats import read_beir_corpus, read_dpr_tsv
from .questions.imports import import_questions
from .retrieval.trec import read_trec_run
from .tsv_lines import TSV_PASSAGE_FORMATS, Quoting, check_quoting

HEAD_RECORDS = 100
PASSAGE_READERS = {"dpr-tsv": read_dpr_tsv, "beir": read_beir_corpus}


def passage_reader(fmt: str, quoting: Quoting = "csv") -> Callable[..., Iterator[pa.RecordBatch]]:
    """The reader of passage format `fmt`, reading lines as `quoting` says; ValueError for an
    unknown format, or a quoting other than csv for a format without a tab-separated file."""
    if fmt not in PASSAGE_READERS:
        raise ValueError(f"unknown passage format {fmt!r}; expected one of {sorted(PASSAGE_READERS)}")
    if check_quoting(quoting, fmt, TSV_PASSAGE_FORMATS) == "csv":
        return PASSAGE_READERS[fmt]
    return partial(PASSAGE_READERS[fmt], quoting=quoting)


def passage_data_file(source_path: Path, fmt: str) -> Path:
    """The file a passage import of format `fmt` reads: ``source_path``, or its corpus.jsonl when
    it is a BEIR folder; FileNotFoundError when there is none, IsADirectoryError for a folder
    given to dpr-tsv (one file; before, the import looked for corpus.jsonl in it and said
    "passage file not found: <folder>/corpus.jsonl", a file dpr-tsv never reads)."""
    if source_path.is_dir() and fmt != "beir":
        raise IsADirectoryError(f"{source_path} is a folder; --format {fmt} reads one file (DPR's psgs_w100.tsv "
                                "layout): give the file, or --format beir for a BEIR folder holding corpus.jsonl")  # fmt: skip
    data_file = source_path / "corpus.jsonl" if source_path.is_dir() else source_path
    if not data_file.is_file():
        where = " (a BEIR folder holds corpus.jsonl)" if source_path.is_dir() else ""
        raise FileNotFoundError(f"passage file not found: {data_file}{where}")
    return data_file


def check_passages_head(fmt: str, path: str, max_record_bytes: int, quoting: Quoting = "csv") -> None:
    """A passage corpus (`odqa import passages`): its data file and first records."""
    source_path = Path(path).expanduser().resolve()
    passage_data_file(source_path, fmt)
    read = passage_reader(fmt, quoting)
    next(read(source_path, batch_size=HEAD_RECORDS, max_record_bytes=max_record_bytes), None)


def check_questions_head(fmt: str, path: str, dataset: str, split: str, max_record_bytes: int,
                         quoting: Quoting = "csv") -> None:  # fmt: skip
    """A question file or folder (`odqa import questions`): its layout and the first records of each
    of its streams (the questions, and the passages and qrels its format brings)."""
    imported = import_questions(fmt, Path(path).expanduser().resolve(), dataset, split, max_record_bytes, quoting)
    for stream in (imported.questions, imported.passages, imported.qrels):
        if stream is not None:
            next(stream.batches(HEAD_RECORDS), None)


def check_run_head(path: str) -> None:
    """A TREC run file (`odqa import run`): its first lines."""
    read_trec_run(Path(path).expanduser().resolve(), first_lines=HEAD_RECORDS)
