"""A run's answers are matched in the passages it was retrieved from, not in whatever the
passages table holds by the time it is evaluated.

A run's passage ids name the passages of the index that found them. An import since may change
a passage's text under the same id (a re-cleaned page, a corrected file), so scoring against the
current texts would credit or blame the retriever for text it never searched. Here passage 5
stops naming "Ilsa Brandt" after the run: the run's own passages still score q3 a hit, the
current ones (`--passages current`) a miss. Once the run's passages are gone from the workspace
(no recent snapshot has them, no kept release pins them), evaluation refuses and says both ways on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from odqa.storage import Workspace

from .test_cli_end_to_end import PASSAGES, sql, write_inputs

R_AT = "SELECT metric, value FROM metrics WHERE run = 'bm25-toy' AND \"group\" = '' ORDER BY metric"


def recall(cli, ws: Path) -> dict[str, float]:
    return {r["metric"]: r["value"] for r in sql(cli, ws, R_AT)}


def scored_in(cli, ws: Path) -> set[str]:
    rows = sql(cli, ws, "SELECT DISTINCT json_extract_string(config, '$.passages_version') AS v FROM metrics "
                        "WHERE run = 'bm25-toy'")  # fmt: skip
    return {r["v"] for r in rows}


def passages_version(ws: Path) -> str:
    return Workspace.open_existing(str(ws)).table_version("passages")


def commit_question_sets(cli, ws: Path, folder: Path, first: int, count: int) -> None:
    """`count` commits that leave the passages alone (each a small question set of its own)."""
    for number in range(first, first + count):
        qas = folder / f"other{number}-dev.qa.csv"
        qas.write_text(f"Which river is it {number}?\t[\"Quellor\"]\n", encoding="utf-8")
        cli("-w", str(ws), "import", "questions", "--format", "dpr-qas", "--dataset", f"other{number}", "--split",
            "dev", str(qas))  # fmt: skip


def test_a_run_is_scored_in_the_passages_it_was_retrieved_from(cli, java: None, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    passages, qas = write_inputs(tmp_path)
    w = ("-w", str(ws))
    cli(*w, "import", "passages", "--format", "dpr-tsv", str(passages))
    cli(*w, "import", "questions", "--format", "dpr-qas", "--dataset", "toy", "--split", "test", str(qas))
    cli(*w, "bm25", "index", "--threads", "1")  # published: the release pins these passages
    cli(*w, "retrieve", "--dataset", "toy", "--split", "test", "--run", "bm25-toy", "--k", "5")
    retrieved_from = passages_version(ws)
    assert Workspace.open_existing(str(ws)).stage_record("run:bm25-toy").report["passages_version"] == retrieved_from
    cli(*w, "evaluate", "--run", "bm25-toy", "--k", "1,5")
    assert recall(cli, ws) == {"R@1": pytest.approx(3 / 5), "R@5": pytest.approx(4 / 5)}

    # passage 5 no longer names the composer q3 asks for (same id, new text)
    changed = [(i, "The opera Glass Tides was written in 1911." if i == "5" else text, title)
               for i, text, title in PASSAGES]  # fmt: skip
    passages.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\t{title}\n" for i, t, title in changed))
    cli(*w, "import", "passages", "--format", "dpr-tsv", "--replace", str(passages))
    now = passages_version(ws)
    assert now != retrieved_from

    out = cli(*w, "evaluate", "--run", "bm25-toy", "--k", "1,5").output
    assert "no-op" in out  # its passages, questions and qrels are those it was scored on
    assert recall(cli, ws) == {"R@1": pytest.approx(3 / 5), "R@5": pytest.approx(4 / 5)}
    out = cli(*w, "evaluate", "--run", "bm25-toy", "--k", "1,5", "--passages", "current").output
    assert f"answers matched in the current passages, as asked: version {now}" in out
    assert recall(cli, ws) == {"R@1": pytest.approx(2 / 5), "R@5": pytest.approx(3 / 5)}  # q3 misses in today's text
    assert scored_in(cli, ws) == {now}

    # four commits later no recent snapshot has the run's passages; the release still pins them
    commit_question_sets(cli, ws, tmp_path, 1, 4)
    out = cli(*w, "evaluate", "--run", "bm25-toy", "--k", "1,5").output
    assert f"the passages the run was retrieved from (the current ones are {now}): version {retrieved_from}" in out
    assert recall(cli, ws) == {"R@1": pytest.approx(3 / 5), "R@5": pytest.approx(4 / 5)}
    assert scored_in(cli, ws) == {retrieved_from}

    # a re-index keeping one release unpins them, later commits delete them: refused, saying how on
    cli(*w, "reindex", "--keep", "1", "--no-dense")
    commit_question_sets(cli, ws, tmp_path, 5, 4)
    refused = cli(*w, "evaluate", "--run", "bm25-toy", "--k", "1,5", ok=False)
    assert refused.exit_code == 1
    assert f"run 'bm25-toy' was retrieved from passages {retrieved_from}, whose files are no longer" in refused.output
    assert "Retrieve the run again" in refused.output
    assert "odqa evaluate --run bm25-toy --passages current" in refused.output
    cli(*w, "evaluate", "--run", "bm25-toy", "--k", "1,5", "--passages", "current")
    assert recall(cli, ws) == {"R@1": pytest.approx(2 / 5), "R@5": pytest.approx(3 / 5)}

    # compare scores each run in its own passages too: a fresh run of today's passages beside it
    cli(*w, "retrieve", "--dataset", "toy", "--split", "test", "--run", "bm25-today", "--k", "5")
    refused = cli(*w, "compare", "bm25-toy", "bm25-today", "--k", "1", ok=False)
    assert "--passages current" in refused.output
    assert "bm25-toy vs bm25-today" in cli(*w, "compare", "bm25-toy", "bm25-today", "--k", "1", "--passages",
                                           "current").output  # fmt: skip


def test_an_imported_run_is_scored_in_the_passages_its_ids_were_checked_against(cli, tmp_path: Path) -> None:
    """An imported run's ids are checked against the passages at its import: later imports do
    not change its figures, and importing the file again checks them against the new passages."""
    ws = tmp_path / "ws"
    passages, qas = write_inputs(tmp_path)
    w = ("-w", str(ws))
    cli(*w, "import", "passages", "--format", "dpr-tsv", str(passages))
    cli(*w, "import", "questions", "--format", "dpr-qas", "--dataset", "toy", "--split", "test", str(qas))
    ids = {r["question"]: r["question_id"] for r in sql(cli, ws, "SELECT question, question_id FROM questions")}
    q3 = ids["Which composer wrote the opera Glass Tides?"]
    trec = tmp_path / "external.trec"
    trec.write_text(f"{q3} Q0 5 1 9.5 external\n{q3} Q0 6 2 8.0 external\n", encoding="utf-8")
    out = cli(*w, "import", "run", str(trec), "--run", "ext").output
    checked_against = passages_version(ws)
    assert Workspace.open_existing(str(ws)).stage_record("run:ext").report["passages_version"] == checked_against
    assert "passages_version: " + checked_against in out
    hits = "SELECT value FROM metrics WHERE run = 'ext' AND metric = 'R@1' AND \"group\" = ''"
    cli(*w, "evaluate", "--run", "ext", "--k", "1")
    assert [r["value"] for r in sql(cli, ws, hits)] == [pytest.approx(1 / 5)]  # q3 of the 5 questions

    changed = [(i, "The opera Glass Tides was written in 1911." if i == "5" else text, title)
               for i, text, title in PASSAGES]  # fmt: skip
    passages.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\t{title}\n" for i, t, title in changed))
    cli(*w, "import", "passages", "--format", "dpr-tsv", "--replace", str(passages))
    now = passages_version(ws)
    out = cli(*w, "evaluate", "--run", "ext", "--k", "1").output
    assert "no-op" in out  # scored in the passages it was imported against, as before
    out = cli(*w, "evaluate", "--run", "ext", "--k", "1", "--passages", "current").output
    assert [r["value"] for r in sql(cli, ws, hits)] == [0.0]
    cli(*w, "evaluate", "--run", "ext", "--k", "1")
    assert [r["value"] for r in sql(cli, ws, hits)] == [pytest.approx(1 / 5)]

    # no snapshot or release keeps them four commits later: refused, saying how on
    commit_question_sets(cli, ws, tmp_path, 1, 4)
    refused = cli(*w, "evaluate", "--run", "ext", "--k", "1", ok=False)
    assert f"run 'ext' was imported against passages {checked_against}, whose files are no longer" in refused.output
    assert "Import the run again (its ids are then checked against the current passages)" in refused.output
    # importing the same file again is no no-op now: its ids are checked against today's passages
    out = cli(*w, "import", "run", str(trec), "--run", "ext").output
    assert "no-op" not in out and "passages_version: " + now in out
    out = cli(*w, "evaluate", "--run", "ext", "--k", "1").output
    assert f"the passages the run was imported against (the current ones): version {now}" in out
    assert [r["value"] for r in sql(cli, ws, hits)] == [0.0]
    assert "no-op" in cli(*w, "import", "run", str(trec), "--run", "ext").output
