"""`odqa export beir` (corpus, queries, qrels in BEIR's layout) and the run card beside a TREC run."""

from __future__ import annotations

import json
from pathlib import Path

from odqa.pipelines.evaluation.metrics import qrels_from_questions
from odqa.pipelines.passage_formats import read_beir_corpus
from odqa.storage import Workspace
from tests.models.filled_workspace import fill_workspace


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    lines = path.read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    qrels: dict[str, dict[str, int]] = {}
    for line in lines[1:]:
        qid, pid, score = line.split("\t")
        qrels.setdefault(qid, {})[pid] = int(score)
    return qrels


def test_export_beir_writes_corpus_queries_and_the_evaluated_qrels(cli, tmp_path):
    root = tmp_path / "ws"
    fill_workspace(root)
    out = tmp_path / "beir"
    result = cli("--workspace", str(root), "export", "beir", "toy", "train", "--out", str(out))
    assert "export beir: done" in result.output
    ws = Workspace.resolve(root)
    passages = ws.read_table("passages")
    corpus = [row for batch in read_beir_corpus(out / "corpus.jsonl") for row in batch.to_pylist()]
    assert sorted((r["passage_id"], r["title"], r["text"]) for r in corpus) == sorted(
        zip(passages["passage_id"].to_pylist(), passages["title"].to_pylist(), passages["text"].to_pylist(),
            strict=True))  # fmt: skip
    questions = ws.sql("SELECT * FROM questions WHERE dataset = 'toy' AND split = 'train'")
    queries = [json.loads(line) for line in (out / "queries.jsonl").read_text().splitlines()]
    assert {q["_id"]: q["text"] for q in queries} == dict(
        zip(questions["question_id"].to_pylist(), questions["question"].to_pylist(), strict=True))
    # The qrels are exactly the judgments `odqa evaluate` scores against.
    assert _read_qrels(out / "qrels" / "train.tsv") == qrels_from_questions(questions)


def test_trec_run_gets_a_run_card(cli, java, tmp_path):
    root = tmp_path / "ws"
    fill_workspace(root)
    w = ("--workspace", str(root))
    cli(*w, "bm25", "index", "--threads", "1")
    trec = tmp_path / "bm25-toy.trec"
    cli(*w, "retrieve", "--retriever", "bm25", "--dataset", "toy", "--split", "dev", "--run", "bm25-toy", "--k", "3",
        "--trec", str(trec))  # fmt: skip
    card = Path(f"{trec}.yaml").read_text()
    assert '"run":\n  "name": "bm25-toy"\n  "file": "bm25-toy.trec"' in card
    assert '"benchmark":\n  "name": "toy"\n  "split": "dev"' in card
    assert '"model":\n  "name": "bm25"' in card


def test_run_card_is_yaml_that_reads_back():
    import yaml

    from odqa.pipelines.retrieval.run_cards import run_card, to_yaml

    record = {"run": "r", "retriever": "dense", "dataset": "squad24", "split": "dev", "k": 100, "questions": 5,
              "questions_without_results": 0,
              "config": {"model": "m: 1", "index_type": "flat", "empty": {}, "ks": [1, 2], "none": None}}  # fmt: skip
    card = run_card(record, "/x/r.trec")
    assert yaml.safe_load(to_yaml(card)) == card
