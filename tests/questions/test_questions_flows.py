"""The question flows and CLI verbs end to end on a workspace (Prefect test server, Oxigraph)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import odqa.flows.cli.questions  # noqa: F401  (registers the verbs on `odqa`)
from odqa.pipelines.questions.sparql import SparqlError
from odqa.pipelines.questions.triples import Triple
from tests.questions.conftest import ntriples

TEMPLATES = {"P19": "Where was [X] born?", "P20": "Where did [X] die?"}
FACTS = [
    Triple("Marie Curie", "P19", "Warsaw", "Q7186", "Q270", ("Warszawa",)),
    Triple("Albert Einstein", "P19", "Ulm", "Q937", "Q3012"),
    Triple("Niels Bohr", "P19", "Copenhagen", "Q7085", "Q1748"),
    Triple("Marie Curie", "P20", "Passy", "Q7186", "Q753227"),
    Triple("Albert Einstein", "P20", "Princeton", "Q937", "Q138518", ("Princeton, New Jersey",)),
]


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    templates = tmp_path / "relation_query_templates.json"
    templates.write_text(json.dumps(TEMPLATES), encoding="utf-8")
    triples = tmp_path / "triples.jsonl"
    triples.write_text("".join(json.dumps({"subject": t.subject, "relation": t.relation, "object": t.object,
                                           "subject_id": t.subject_id, "object_id": t.object_id,
                                           "object_aliases": list(t.object_aliases)}) + "\n" for t in FACTS), "utf-8")
    return {"templates": templates, "triples": triples}


def _add_corpus(ws) -> None:
    passages = pa.table({
        "passage_id": ["10", "11", "12"], "article_id": [1, 1, 2],
        "title": ["Marie Curie", "Marie Curie", "Albert Einstein"],
        "text": ["Curie was born in Warsaw.", "She died at Passy, Haute-Savoie.", "Einstein was born in Ulm."],
        "position": [0, 1, 0], "source": ["test"] * 3,
    })
    articles = pa.table({"article_id": [1, 2, 3], "title": ["Marie Curie", "Albert Einstein", "Einstein"],
                         "namespace": [0, 0, 0], "is_redirect": [False, False, True],
                         "redirect_target": [None, None, "Albert Einstein"], "source": ["test"] * 3})
    with ws.transaction("test-corpus") as tx:
        tx.write("passages", passages, source="test")
        tx.write("articles", articles, source="test")


def test_trex_from_jsonl_single_split_with_positives_and_noop(cli, workspace, inputs) -> None:
    _add_corpus(workspace)
    args = ["--workspace", str(workspace.root), "questions", "trex", "--triples", str(inputs["triples"]),
            "--templates", str(inputs["templates"]), "--dataset", "facts", "--splits", "none", "--split", "test"]
    first = cli(*args)
    assert "questions trex: done" in first.output and "questions_with_positive: 3" in first.output
    rows = {r["question"]: r for r in workspace.read_table("questions").to_pylist()}
    assert set(rows) == {make for make in (
        "Where was Marie Curie born?", "Where was Albert Einstein born?", "Where was Niels Bohr born?",
        "Where did Marie Curie die?", "Where did Albert Einstein die?")}
    assert rows["Where was Marie Curie born?"]["positive_ids"] == ["10"]
    assert rows["Where did Marie Curie die?"]["positive_ids"] == ["11"]
    assert rows["Where did Albert Einstein die?"]["answers"] == ["Princeton", "Princeton, New Jersey"]
    assert {r["split"] for r in rows.values()} == {"test"}
    metrics = workspace.sql("SELECT metric, value FROM metrics WHERE \"group\" = 'P19' AND split = 'test'").to_pylist()
    assert {(m["metric"], m["value"]) for m in metrics} >= {("questions", 3.0), ("questions_with_positive", 2.0)}
    assert "no-op" in cli(*args).output
    assert workspace.rows("questions") == 5


def test_trex_sparql_matches_the_jsonl_path(cli, workspace, inputs, oxigraph) -> None:
    endpoint = oxigraph(ntriples(FACTS))
    common = ["--templates", str(inputs["templates"]), "--relations", "P19,P20", "--size-per-relation", "3",
              "--analysis-per-relation", "1"]
    cli("--workspace", str(workspace.root), "questions", "trex", "--sparql", endpoint, "--dataset", "a", *common)
    cli("--workspace", str(workspace.root), "questions", "trex", "--triples", str(inputs["triples"]),
        "--dataset", "b", *common)
    table = workspace.read_table("questions")
    by_dataset = {d: sorted((r["split"], r["question"], tuple(r["answers"]), r["subject_id"])
                            for r in table.to_pylist() if r["dataset"] == d) for d in ("a", "b")}
    assert by_dataset["a"] == by_dataset["b"] and len(by_dataset["a"]) == 4  # P20: 2 facts, 0 in test_unseen


def test_sparql_endpoint_that_stays_down_writes_nothing(workspace, inputs, front_server) -> None:
    from odqa.flows.stages.questions import trex_questions_flow

    front = front_server(lambda n: (503, {"Retry-After": "0"}), upstream=None)
    with pytest.raises(SparqlError, match="HTTP 503"):
        trex_questions_flow(templates=str(inputs["templates"]), dataset="down", sparql=front.url, relations=["P19"],
                            sparql_retries=1, sparql_backoff=0.0, task_retries=1, task_retry_delay=0.0,
                            workspace=str(workspace.root))
    assert front.requests == 4  # (1 try + 1 client retry) x (1 run + 1 Prefect retry)
    assert workspace.rows("questions") == 0 and workspace.rows("metrics") == 0


def _paq_file(path: Path) -> Path:
    lines = []
    for p in range(10):
        for q in range(3 + p % 2):
            lines.append(json.dumps({"question": f"q{q} of passage {p}", "subsets": ["L1"], "answer": [f"a{q}"],
                                     "passage_score": -1.0,
                                     "answers": [{"passage_id": str(p), "offset": 0, "text": "x", "extractor": "L"}]}))
    lines.append(json.dumps({"question": "lonely", "answer": ["b"], "answers": [{"passage_id": "99"}]}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_paq_verb_writes_questions_flipped_and_metrics(cli, workspace, tmp_path) -> None:
    paq = _paq_file(tmp_path / "PAQ.metadata.jsonl")
    result = cli("--workspace", str(workspace.root), "questions", "paq", str(paq), "--passages", "10", "--seed", "3")
    assert "eligible_passages: 10" in result.output
    splits = workspace.sql("SELECT split, count(*) AS n FROM questions WHERE dataset = 'paq' GROUP BY split").to_pylist()
    assert {r["split"]: r["n"] for r in splits} == {"train": 7, "dev": 1, "test": 2}
    flipped = workspace.read_table("flipped").to_pylist()
    assert len(flipped) == 10 and all(len(r["positive_questions"]) >= 3 for r in flipped)
    assert workspace.sql("SELECT value FROM metrics WHERE metric = 'sampled_passages'").to_pylist() == [{"value": 10.0}]
    assert not list(workspace.tmp_dir.iterdir())  # the spill directory is removed


def test_import_questions_formats(cli, workspace, tmp_path) -> None:
    ws = ["--workspace", str(workspace.root)]
    nq = tmp_path / "NQ-open.dev.jsonl"
    nq.write_text('{"question": "who wrote hamlet", "answer": ["Shakespeare", "William Shakespeare"]}\n', "utf-8")
    cli(*ws, "import", "questions", "--format", "nq-open", "--dataset", "nq", "--split", "dev", str(nq))
    # A DPR file whose contexts partly exist already: those are not added a second time.
    with workspace.transaction("corpus") as tx:
        tx.write("passages", pa.table({"passage_id": ["100"], "title": ["Hamlet"], "text": ["Hamlet is a play."]}),
                 source="dpr-tsv:psgs_w100.tsv")
    dpr = tmp_path / "biencoder-nq-dev.json"
    dpr.write_text(json.dumps([{"question": "who wrote hamlet", "answers": ["Shakespeare"],
                                "positive_ctxs": [{"title": "Hamlet", "text": "Hamlet is a play.", "passage_id": "100"}],
                                "negative_ctxs": [{"title": "Ulm", "text": "Ulm is a city.", "passage_id": "200"}],
                                "hard_negative_ctxs": [{"title": "Ulm", "text": "Ulm is a city.", "passage_id": "200"}]}]),
                   "utf-8")
    result = cli(*ws, "import", "questions", "--format", "dpr-json", "--dataset", "nq", "--split", "train", str(dpr))
    assert "passages: 1" in result.output
    assert sorted(workspace.read_table("passages").column("passage_id").to_pylist()) == ["100", "200"]
    beir = tmp_path / "scifact"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "7", "title": "T", "text": "Some text."}\n', "utf-8")
    (beir / "queries.jsonl").write_text('{"_id": "1", "text": "a claim"}\n', "utf-8")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t7\t1\n", "utf-8")
    cli(*ws, "import", "questions", "--format", "beir", "--dataset", "scifact", "--split", "test", str(beir))
    assert workspace.read_table("qrels").to_pylist()[0]["passage_id"] == "scifact:7"
    counts = workspace.sql("SELECT dataset, split, count(*) AS n FROM questions GROUP BY ALL ORDER BY ALL").to_pylist()
    assert counts == [{"dataset": "nq", "split": "dev", "n": 1}, {"dataset": "nq", "split": "train", "n": 1},
                      {"dataset": "scifact", "split": "test", "n": 1}]
    assert "no-op" in cli(*ws, "import", "questions", "--format", "nq-open", "--dataset", "nq", "--split", "dev",
                          str(nq)).output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": ["a"]}\n{"question": \n', "utf-8")
    failed = cli(*ws, "import", "questions", "--format", "nq-open", "--dataset", "bad", "--split", "dev", str(bad), ok=False)
    assert failed.exit_code == 1 and "bad.jsonl:2" in failed.output
    assert workspace.sql("SELECT count(*) AS n FROM questions WHERE dataset = 'bad'").to_pylist() == [{"n": 0}]


def test_import_counts_questions_without_answers(cli, workspace, tmp_path) -> None:
    """An empty answers list is imported (the question is real) but counted in the report and
    metrics: answer-based R@K and distant supervision cannot use it, and it used to pass unseen."""
    ws = ["--workspace", str(workspace.root)]
    qas = tmp_path / "dev.qas.tsv"
    qas.write_text('who wrote hamlet?\t["Shakespeare"]\nwho wrote nothing?\t[]\nwhat is x?\t[]\n', "utf-8")
    result = cli(*ws, "import", "questions", "--format", "dpr-qas", "--dataset", "d", "--split", "dev", str(qas))
    assert "questions: 3" in result.output and "questions_without_answers: 2" in result.output
    rows = workspace.sql("SELECT value FROM metrics WHERE metric = 'questions_without_answers'").to_pylist()
    assert rows == [{"value": 2.0}]
    full = tmp_path / "full.qas.tsv"
    full.write_text('who wrote hamlet?\t["Shakespeare"]\n', "utf-8")
    shown = cli(*ws, "import", "questions", "--format", "dpr-qas", "--dataset", "d", "--split", "test", str(full))
    assert "questions_without_answers" not in shown.output  # shown only when there are any
