"""The choice lists every layer shares, each declared once as a `Literal` type.

The CLI's `click.Choice` options, the flows' parameters (so the UI's dropdowns), the service's
request checks and the index layout all take their choices from here. Nothing is imported: the
CLI reads these before it loads anything heavy.
"""

from __future__ import annotations

from typing import Literal, get_args

IndexType = Literal["flat", "hnsw", "ivfpq"]  # a FAISS index: exact inner product, graph, compressed
INDEX_TYPES: tuple[IndexType, ...] = get_args(IndexType)

RetrieverKind = Literal["bm25", "dense", "hybrid"]  # what a searcher answers with
RETRIEVER_KINDS: tuple[RetrieverKind, ...] = get_args(RetrieverKind)

PassageFormat = Literal["dpr-tsv", "beir"]  # a passage corpus: DPR's psgs_w100.tsv, a BEIR corpus.jsonl
PASSAGE_FORMATS: tuple[PassageFormat, ...] = get_args(PassageFormat)

QuestionFormat = Literal["dpr-json", "dpr-qas", "nq-open", "entityquestions", "squad", "beir"]  # a QA set
QUESTION_FORMATS: tuple[QuestionFormat, ...] = get_args(QuestionFormat)

OnDuplicate = Literal["refuse", "keep-existing"]  # an id another source already holds
ON_DUPLICATE: tuple[OnDuplicate, ...] = get_args(OnDuplicate)

AnswerMatch = Literal["auto", "string", "regex"]  # how an answer matches a passage (auto: by dataset)
MATCH_CHOICES: tuple[AnswerMatch, ...] = get_args(AnswerMatch)

# Which passages' texts a run's answers are matched in: those it was retrieved from, or the current ones.
RunPassages = Literal["run", "current"]
RUN_PASSAGES: tuple[RunPassages, ...] = get_args(RunPassages)

TrexSplits = Literal["thesis", "none"]  # template questions: the thesis' splits, or one split
TREX_SPLITS: tuple[TrexSplits, ...] = get_args(TrexSplits)

TrainingMode = Literal["single-set", "multi-set"]  # later rounds: BM25 plus mined negatives, or mined only
TRAINING_MODES: tuple[TrainingMode, ...] = get_args(TrainingMode)

# The compute precision of encoding: bf16 casts the linear layers' weights (a copy) and autocasts.
Precision = Literal["auto", "fp32", "bf16", "fp16"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)

Quoting = Literal["csv", "none"]  # a tab-separated line: split as csv.reader does, or at tabs only
QUOTINGS: tuple[Quoting, ...] = get_args(Quoting)

PositivesRetriever = Literal["bm25", "dense"]  # what ranks the passages positives are derived from

# The papers' setups `odqa reproduce` runs: one file each in storage/paper_setups/ (the test
# tests/reproduce/test_setup_files.py keeps this list and the files the same).
SetupName = Literal["desire-me-fever", "dpr-taser-nq", "dual-encoder-comparison", "taser-entityquestions"]
