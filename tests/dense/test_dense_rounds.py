"""TASER appendix B end to end: BM25 negatives -> round-1 model -> mined P2 -> round-2 model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dense_minilm import minilm_dir
from test_dense_flows import PASSAGES, QAS

import flows.cli.questions  # noqa: F401
from pipelines.evaluation.answers import has_answer
from pipelines.retrieval.java import JavaMissingError, check_java
from storage import Workspace

GOLD = ["1", "4", "5", "7", "8"]  # the passage answering each of QAS, in order


@pytest.mark.e2e
def test_two_rounds_with_mined_negatives(cli, tmp_path: Path) -> None:
    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"round 1 needs BM25 (a JDK): {error}")
    from flows.dense import negative_rounds_flow

    ws_dir = tmp_path / "ws"
    texts = {i: (t, h) for i, t, h in PASSAGES}
    records = [{"question": q, "answers": a, "hard_negative_ctxs": [], "negative_ctxs": [],
                "positive_ctxs": [{"passage_id": g, "title": texts[g][1], "text": texts[g][0]}]}
               for (q, a), g in zip(QAS, GOLD, strict=True)]  # fmt: skip
    train = tmp_path / "toy-train.json"
    train.write_text(json.dumps(records))
    others = tmp_path / "psgs.tsv"
    others.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\t{h}\n" for i, t, h in PASSAGES))
    cli("-w", str(ws_dir), "import", "passages", "--format", "dpr-tsv", str(others))
    cli("-w", str(ws_dir), "import", "questions", "--format", "dpr-json", "--dataset", "toy", "--split", "train",
        str(train))  # fmt: skip

    report = negative_rounds_flow(arch="sde", base=str(minilm_dir()), train=["toy:train"], model_id="toy-dpr",
                                  mode="single-set", max_steps=1, batch_size=2, depth=5, count=3,
                                  workspace=str(ws_dir))  # fmt: skip
    ws = Workspace.resolve(ws_dir)
    models = sorted(ws.read_table("models", columns=["model_id"])["model_id"].to_pylist())
    assert models == ["toy-dpr", "toy-dpr-round1"]
    assert report["mined"][0]["questions_updated"] == 5
    questions = ws.read_table("questions", columns=["answers", "positive_ids", "hard_negative_ids"]).to_pylist()
    bm25_first = [row for row in questions if row["hard_negative_ids"]]
    assert len(bm25_first) == 5
    for row in questions:
        negatives = row["hard_negative_ids"]
        assert not set(negatives) & set(row["positive_ids"])
        assert not any(has_answer(texts[p][0], row["answers"]) for p in negatives)
        assert len(negatives) >= 2  # P1 (one BM25 negative) united with mined P2
