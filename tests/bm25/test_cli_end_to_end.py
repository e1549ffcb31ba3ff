"""End to end through the CLI: DPR-format passages + questions -> BM25 index -> run -> metrics.

The data is written by the test in DPR's published formats (psgs_w100-style TSV, qas TSV). Each
question has distinctive words so its BM25 ranking is predictable; the expected accuracy is
worked out below and checked through `odqa sql`, as a user would look at it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odqa.pipelines.evaluation.answers import has_answer

PASSAGES = [
    ("1", "Zorbania is a landlocked country. Its longest river is the Quellor.", "Zorbania"),
    ("2", "The Quellor river floods every spring in the lowlands.", "Quellor"),
    ("3", "Vexland trade routes meet at the old harbor of Vexland, a trade harbor for centuries.", "Vexland"),
    ("4", "Vexland has a small capital called Morvil near the coast.", "Vexland geography"),
    ("5", "The composer Ilsa Brandt wrote the opera Glass Tides in 1911.", "Ilsa Brandt"),
    ("6", "Glass Tides premiered in Kettering to mixed reviews.", "Glass Tides"),
    ("7", "Farnwick is known for its copper mines and its blue granite.", "Farnwick"),
    ("8", "The mountain Hollow Peak rises above the Tessaly valley.", "Hollow Peak"),
]
QAS = [
    # q1: words "longest river Zorbania" -> passage 1 (rank 1) holds "Quellor"           -> hit@1
    ("What is the longest river of Zorbania?", ["Quellor"]),
    # q2: "trade harbor Vexland capital": passage 3 (3 matching words, no answer) beats
    #     passage 4 ("Vexland", "capital") which holds "Morvil"                           -> hit@2
    ("Which trade harbor city is the capital of Vexland?", ["Morvil"]),
    # q3: "opera Glass Tides composer" -> passage 5 names "Ilsa Brandt"                   -> hit@1
    ("Which composer wrote the opera Glass Tides?", ["Ilsa Brandt"]),
    # q4: "Farnwick mines" -> passage 7, which says copper, not gold                     -> miss
    ("What does Farnwick mine besides gold?", ["silver"]),
    # q5: "Hollow Peak valley" -> passage 8 holds "Tessaly"                              -> hit@1
    ("Above which valley does Hollow Peak rise?", ["Tessaly"]),
]
# R@1 = 3/5 (q1, q3, q5), R@2 = R@5 = 4/5 (q2 joins at rank 2)


def write_inputs(folder: Path) -> tuple[Path, Path]:
    passages = folder / "psgs.tsv"
    passages.write_text(
        "id\ttext\ttitle\n" + "".join(f"{i}\t{text}\t{title}\n" for i, text, title in PASSAGES)
    )
    qas = folder / "toy-test.qa.csv"
    qas.write_text("".join(f"{q}\t{json.dumps(a)}\n" for q, a in QAS))
    return passages, qas


def sql(cli, ws: Path, query: str) -> list[dict]:
    out = cli("-w", str(ws), "sql", query, "--format", "json").output
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_index_retrieve_evaluate_compare_negatives(cli, java: None, tmp_path: Path, monkeypatch) -> None:
    ws = tmp_path / "ws"
    passages, qas = write_inputs(tmp_path)
    w = ("-w", str(ws))
    cli(*w, "import", "passages", "--format", "dpr-tsv", str(passages))
    cli(*w, "import", "questions", "--format", "dpr-qas", "--dataset", "toy", "--split", "test", str(qas))

    assert "bm25 index: done" in cli(*w, "bm25", "index", "--threads", "1").output
    assert "no-op" in cli(*w, "bm25", "index").output

    trec = tmp_path / "bm25-toy.trec"
    out = cli(*w, "retrieve", "--retriever", "bm25", "--dataset", "toy", "--split", "test", "--run", "bm25-toy",
              "--k", "5", "--trec", str(trec)).output  # fmt: skip
    assert "questions: 5" in out
    assert len(trec.read_text().splitlines()) == sql(cli, ws, "SELECT count(*) AS n FROM runs")[0]["n"]

    out = cli(*w, "evaluate", "--run", "bm25-toy", "--k", "1,2,5").output
    assert "R@1" in out and "plot:" in out
    metrics = {r["metric"]: r["value"] for r in sql(cli, ws, "SELECT metric, value FROM metrics "
                                                    "WHERE run = 'bm25-toy' AND \"group\" = ''")}  # fmt: skip
    assert metrics == {"R@1": pytest.approx(3 / 5), "R@2": pytest.approx(4 / 5), "R@5": pytest.approx(4 / 5)}
    assert (ws / "plots" / "recall-bm25-toy.png").read_bytes()[:4] == b"\x89PNG"
    assert "no-op" in cli(*w, "evaluate", "--run", "bm25-toy", "--k", "1,2,5").output

    # the TREC file imports back as an identical run; comparing the two finds no difference
    cli(*w, "import", "run", "--format", "trec", str(trec), "--run", "imported")
    out = cli(*w, "compare", "bm25-toy", "imported", "--k", "1,5").output
    assert "bm25-toy vs imported" in out
    assert (ws / "plots" / "compare-bm25-toy-vs-imported.png").is_file()
    assert "passages_unknown: 0" in cli(*w, "import", "run", str(trec), "--run", "imported").output  # no-op
    # a run naming passages this workspace lacks says how many (answer match cannot find them)
    foreign = tmp_path / "foreign.trec"
    first = trec.read_text().splitlines()[0].split()
    foreign.write_text(f"{first[0]} Q0 {first[2]} 1 2.0 x\n{first[0]} Q0 not-here 2 1.0 x\n", encoding="utf-8")
    out = cli(*w, "import", "run", str(foreign), "--run", "foreign").output
    assert "passages_unknown: 1" in out and "questions_unknown: 0" in out

    cli(*w, "negatives", "bm25", "--dataset", "toy", "--split", "test", "--count", "2")
    rows = sql(cli, ws, "SELECT question, answers, hard_negative_ids FROM questions ORDER BY question")
    texts = {i: f"{title}\n{text}" for i, text, title in PASSAGES}
    for row in rows:
        assert not any(has_answer(texts[pid], row["answers"]) for pid in row["hard_negative_ids"]), row
    # BM25 only returns passages sharing a word with the question; of those, the ones without
    # the answer are the negatives (at most --count): q1's other match (2) names the Quellor,
    # q2's passage 4 holds Morvil, q5 matches passage 8 only.
    assert {r["question"].split()[-1]: r["hard_negative_ids"] for r in rows} == {
        "rise?": [],
        "gold?": ["7"],
        "Zorbania?": [],
        "Tides?": ["6"],
        "Vexland?": ["3"],
    }

    # without a JDK the BM25 verbs fail fast with the install hint; evaluation still works
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("ODQA_JVM_DIRS", str(tmp_path / "no-jvms"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    failed = cli(*w, "bm25", "index", ok=False)
    assert failed.exit_code == 1 and "openjdk-21-jdk-headless" in failed.output
    failed = cli(*w, "retrieve", "--dataset", "toy", "--split", "test", "--run", "again", ok=False)
    assert failed.exit_code == 1 and "No usable Java found" in failed.output
    assert "R@1" in cli(*w, "evaluate", "--run", "imported", "--k", "1").output
