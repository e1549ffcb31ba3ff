"""`odqa positives bm25|dense`: answer-only questions get positives by DPR's distant supervision,
marked as derived, and `odqa train --dev` then takes them; before, the training is refused with a
message that names the verb. On the real SQuAD set in ../shared/data, BM25 positives go to exactly the
share of questions that BM25's R@K counts as hits."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from odqa.storage import Workspace
from tests.conftest import shared_data
from tests.models.conftest import write_tiny_checkpoint
from tests.models.filled_workspace import fill_workspace


def _answer_only(root: Path, split: str) -> None:
    """The toy workspace's `split` questions as an answer-only set brings them: no positive ids."""
    ws = Workspace.resolve(root)

    def drop_positives(part: pa.Table) -> pa.Table:
        mine = pc.equal(part["split"], split).to_pylist()
        ids = [[] if chosen else old for old, chosen in zip(part["positive_ids"].to_pylist(), mine, strict=True)]
        return part.set_column(part.schema.get_field_index("positive_ids"), part.schema.field("positive_ids"),
                               pa.array(ids, part.schema.field("positive_ids").type))  # fmt: skip

    with ws.transaction("answer-only") as tx:
        tx.rewrite("questions", drop_positives)


def test_answer_only_dev_questions_get_positives_and_then_select_the_model(cli, java, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    fill_workspace(root)
    _answer_only(root, "dev")
    w = ["-w", str(root)]
    base = write_tiny_checkpoint(tmp_path / "tiny", layers=1, dropout=0.0, seed=0)
    train = [*w, "train", "--arch", "sde", "--base", base, "--train", "toy:train", "--dev", "toy:dev", "--model-id",
             "sde-toy", "--max-steps", "1", "--batch-size", "3"]  # fmt: skip

    refused = cli(*train, ok=False)
    assert refused.exit_code == 1
    assert ("toy:dev: none of its 2 questions has a positive passage in the passages table; 2 have no positive "
            "passage (answer-only questions): give them positives from their answers with "
            "`odqa positives bm25 --dataset toy --split dev`") in refused.output  # fmt: skip
    assert "{'" not in refused.output  # no raw dict

    cli(*w, "bm25", "index")
    out = cli(*w, "positives", "bm25", "--dataset", "toy", "--split", "dev").output
    assert "positives bm25: done" in out
    for figure in ("derived_by: bm25", "questions: 2", "with_own_positives: 0", "searched: 2", "derived: 2",
                   "without_positive: 0", "derived_share: 1"):  # fmt: skip
        assert any(line.strip() == figure for line in out.splitlines()), (figure, out)
    ws = Workspace.resolve(root)
    rows = ws.sql("SELECT question_id, positive_ids, positives_from FROM questions WHERE split = 'dev' "
                  "ORDER BY question_id").to_pylist()  # fmt: skip
    # the passage of each fact holds its answer; the fillers (same words as the question) do not
    assert rows == [{"question_id": "toy-6", "positive_ids": ["p6"], "positives_from": "bm25"},
                    {"question_id": "toy-7", "positive_ids": ["p7"], "positives_from": "bm25"}]  # fmt: skip
    assert "positives bm25: no-op" in cli(*w, "positives", "bm25", "--dataset", "toy", "--split", "dev").output

    gold = cli(*w, "positives", "bm25", "--dataset", "toy", "--split", "train").output
    for figure in ("with_own_positives: 7", "own_positives_not_in_passages: 1", "searched: 0"):  # toy-x: 'nowhere'
        assert any(line.strip() == figure for line in gold.splitlines()), (figure, gold)
    assert ws.sql("SELECT count(*) AS n FROM questions WHERE split = 'train' AND positives_from IS NOT NULL"
                  ).to_pylist() == [{"n": 0}]  # fmt: skip

    # the same through a dense model (the tiny base, over all 16 passages: each answer is in one
    # passage only, so it is the positive in any order): positives derived before are derived again
    dense = cli(*w, "positives", "dense", "--model", base, "--dataset", "toy", "--split", "dev", "--depth", "16").output
    for figure in (f"derived_by: dense:{base}", "searched: 2", "derived: 2"):
        assert any(line.strip() == figure for line in dense.splitlines()), (figure, dense)
    assert ws.sql("SELECT DISTINCT positives_from FROM questions WHERE split = 'dev'").to_pylist() == [
        {"positives_from": f"dense:{base}"}]  # fmt: skip

    trained = cli(*train).output
    assert "train sde-toy: done" in trained and "dev R@1:" in trained
    config = json.loads(ws.sql("SELECT config FROM models WHERE model_id = 'sde-toy'")["config"][0].as_py())
    assert set(config["dev"]["metrics"]) == {"R@1", "R@5", "R@20", "R@100"}
    assert config["data"]["toy:dev"]["examples"] == 2


def test_on_squad_bm25_positives_go_to_the_share_of_questions_bm25_recall_counts(cli, java, tmp_path: Path) -> None:
    """Real SQuAD dev questions of ../shared/data in the README's answer-only layout (the first
    300, to keep the test short) over all 1,154 passages: BM25's R@20, then its positives at depth 20."""
    passages, dev = shared_data("squad24", "passages.tsv"), shared_data("squad24", "dev.qas.tsv")
    questions = tmp_path / "dev.qas.tsv"
    questions.write_text("".join(dev.read_text(encoding="utf-8").splitlines(keepends=True)[:300]), encoding="utf-8")
    w = ["-w", str(tmp_path / "ws")]
    cli(*w, "import", "passages", "--format", "dpr-tsv", str(passages))
    cli(*w, "import", "questions", "--format", "dpr-qas", "--dataset", "squad", "--split", "dev", str(questions))
    cli(*w, "bm25", "index")
    cli(*w, "retrieve", "--dataset", "squad", "--split", "dev", "--run", "bm25-dev", "--k", "20")
    cli(*w, "evaluate", "--run", "bm25-dev", "--k", "20")
    cli(*w, "positives", "bm25", "--dataset", "squad", "--split", "dev", "--depth", "20")
    ws = Workspace.resolve(tmp_path / "ws")
    derived = ws.stage_record("positives:squad:dev").report
    recall = ws.sql("SELECT value FROM metrics WHERE run = 'bm25-dev' AND metric = 'R@20' AND \"group\" = ''")
    assert derived["questions"] == derived["searched"] == 300
    assert derived["derived_share"] == round(recall["value"][0].as_py(), 4) > 0.5
    assert ws.sql("SELECT count(*) AS n FROM questions WHERE positives_from = 'bm25'")["n"][0].as_py() == \
        derived["derived"]  # fmt: skip
