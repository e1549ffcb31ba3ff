"""End to end through the CLI and flows: passages + questions -> encode -> index -> dense and
hybrid runs -> tuned alpha -> search -> mined negatives -> t-SNE plot -> query-side fine-tuning."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dense_minilm import minilm_dir

from odqa.pipelines.evaluation.answers import has_answer
from odqa.pipelines.retrieval.java import JavaMissingError, check_java
from odqa.storage import Workspace

PASSAGES = [
    ("1", "Zorbania is a landlocked country. Its longest river is the Quellor.", "Zorbania"),
    ("2", "The Quellor river floods every spring in the lowlands.", "Quellor"),
    ("3", "Vexland trade routes meet at the old harbor of Vexland, a trade harbor for centuries.", "Vexland"),
    ("4", "Vexland has a small capital called Morvil near the coast.", "Vexland geography"),
    ("5", "The composer Ilsa Brandt wrote the opera Glass Tides in 1911.", "Ilsa Brandt"),
    ("6", "Glass Tides premiered in Kettering to mixed reviews.", "Glass Tides"),
    ("7", "Farnwick is known for its copper mines and its blue granite.", "Farnwick"),
    ("8", "The mountain Hollow Peak rises above the Tessaly valley.", "Hollow Peak"),
    ("9", "Pianos are tuned by adjusting string tension with a lever.", "Piano tuning"),
    ("10", "Bread rises because yeast produces carbon dioxide.", "Bread"),
]
QAS = [
    ("What is the longest river of Zorbania?", ["Quellor"]),
    ("What is the capital of Vexland?", ["Morvil"]),
    ("Which composer wrote the opera Glass Tides?", ["Ilsa Brandt"]),
    ("What is mined in Farnwick?", ["copper"]),
    ("Above which valley does Hollow Peak rise?", ["Tessaly"]),
]


def sql(cli, ws: Path, query: str) -> list[dict]:
    out = cli("-w", str(ws), "sql", query, "--format", "json").output
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.e2e
def test_dense_pipeline_end_to_end(cli, tmp_path: Path) -> None:
    from odqa.flows.stages.qsft import qsft_flow
    from odqa.flows.stages.retrieve import retrieve_flow
    from odqa.storage.index_layout import IndexLayout
    from odqa.storage.model_registry import resolve_model
    from odqa.storage.releases import current_release

    ws_dir = tmp_path / "ws"
    w = ("-w", str(ws_dir))
    passages = tmp_path / "psgs.tsv"
    passages.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\t{h}\n" for i, t, h in PASSAGES))
    qas = tmp_path / "toy.qa.csv"
    qas.write_text("".join(f"{q}\t{json.dumps(a)}\n" for q, a in QAS))
    cli(*w, "import", "passages", "--format", "dpr-tsv", str(passages))
    cli(*w, "import", "questions", "--format", "dpr-qas", "--dataset", "toy", "--split", "dev", str(qas))
    model = str(minilm_dir())

    out = cli(*w, "encode", "--model", model, "--shard-size", "4", "--batch-size", "4").output
    assert "encode: done" in out and "passages: 10" in out and "shards: 3" in out
    assert "encode: no-op" in cli(*w, "encode", "--model", model, "--shard-size", "4", "--batch-size", "4").output
    out = cli(*w, "index", "build", "--model", model, "--type", "flat").output
    assert "index build: done" in out
    assert "hnsw_m" not in out and "nlist" not in out and "null" not in out, out  # a flat index has no such settings
    assert "index build: no-op" in cli(*w, "index", "build", "--model", model).output

    retrieve = [*w, "retrieve", "--retriever", "dense", "--model", model, "--dataset", "toy", "--split", "dev",
                "--run", "dense-toy", "--k", "3"]  # fmt: skip
    out = cli(*retrieve).output
    assert "retrieve: done" in out and "rows: 15" in out
    assert "index_params" not in out and "null" not in out and "None" not in out, out  # what applies, no more
    assert max(len(line) for line in out.splitlines()) < 200 and "config.index_type: flat" in out, out
    log = (ws_dir / "logs" / "odqa.log").read_text(encoding="utf-8")  # the flow's own report, as printed
    assert "IndexBuildReport(" not in log and "RetrieveReport(" not in log
    assert re.search(r"retrieve dense-toy: done\n +run: dense-toy\n(.*\n)* +rows: 15\n", log), log[-3000:]
    assert "retrieve: no-op" in cli(*retrieve).output
    top = sql(cli, ws_dir, "SELECT q.question, r.passage_id FROM runs r JOIN questions q USING (question_id) "
                           "WHERE r.run = 'dense-toy' AND r.rank = 1 ORDER BY q.question")  # fmt: skip
    first = {row["question"]: row["passage_id"] for row in top}
    assert first["What is the longest river of Zorbania?"] == "1"
    assert first["Which composer wrote the opera Glass Tides?"] == "5"

    out = cli(*w, "search", "--model", model, "--k", "2", "Who wrote Glass Tides?").output
    assert "1. [" in out and "Ilsa Brandt (5)" in out

    try:
        check_java()
    except JavaMissingError:
        java = False  # hybrid needs BM25 (Lucene); the rest is checked without it
    else:
        java = True
    if java:
        cli(*w, "bm25", "index", "--threads", "1")
        out = cli(*w, "tune-hybrid", "--model", model, "--dev", "toy:dev", "--k", "1").output
        assert "tune-hybrid: done" in out and "alpha: " in out
        alphas = sql(cli, ws_dir, "SELECT \"group\", value FROM metrics WHERE run LIKE 'tune-hybrid:%'")
        assert len(alphas) == 16
        hybrid = retrieve_flow(dataset="toy", split="dev", run="hybrid-toy", model=model, retriever="hybrid", k=3,
                               workspace=str(ws_dir))  # fmt: skip
        ws = Workspace.resolve(ws_dir)
        tuned = json.loads(IndexLayout.of(ws).hybrid_file(resolve_model(ws, model).key).read_text())
        assert hybrid.rows == 15 and hybrid.config["alpha"] == tuned["alpha"]
        # the release published before the tuning (by index build) is published again with the alpha,
        # which the service takes from it; CLI search uses and shows the same alpha
        served = current_release(ws)
        assert [entry.alpha for entry in served.dense] == [tuned["alpha"]] and f"release: {served.release}" in out
        out = cli(*w, "search", "--retriever", "hybrid", "--model", model, "--k", "2", "Who wrote Glass Tides?").output
        assert f"hybrid alpha {tuned['alpha']:g}" in out and "Ilsa Brandt (5)" in out

    out = cli(*w, "mine", "--model", model, "--dataset", "toy", "--split", "dev", "--depth", "5").output
    assert "mine: done" in out
    rows = sql(cli, ws_dir, "SELECT q.answers, q.hard_negative_ids FROM questions q")
    texts = {i: t for i, t, _ in PASSAGES}
    assert all(row["hard_negative_ids"] for row in rows)
    for row in rows:
        assert not any(has_answer(texts[p], row["answers"]) for p in row["hard_negative_ids"])

    out = cli(*w, "plot", "embeddings", "--model", model, "--samples", "5").output
    assert "tower_separation" in out and len(list((ws_dir / "plots").glob("tsne-*.png"))) == 1

    report = qsft_flow(model=model, train=["toy:dev"], model_id="minilm-qsft", epochs=1, batch_size=5, top_k=5,
                       warmup_steps=0, workspace=str(ws_dir))  # fmt: skip
    assert report.steps == 1
    registered = sql(cli, ws_dir, "SELECT model_id, base FROM models")
    assert registered == [{"model_id": "minilm-qsft", "base": model}]
    # The fine-tuned model searches the index of its passage-side model (no re-encoding).
    again = retrieve_flow(dataset="toy", split="dev", run="qsft-toy", retriever="dense", model="minilm-qsft", k=3,
                          workspace=str(ws_dir))  # fmt: skip
    assert again.rows == 15
