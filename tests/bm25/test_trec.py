"""TREC run files: round trip, rank re-derivation, and clear errors on bad lines."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from odqa.pipelines.retrieval.runs import RUN_SCHEMA
from odqa.pipelines.retrieval.trec import TrecFormatError, read_trec_run, write_trec_run


def run_rows() -> pa.Table:
    return pa.table(
        {
            "question_id": ["q1", "q1", "q1", "q2", "q10"],
            "passage_id": ["p9", "p2", "wiki:3", "p2", "p1"],
            "rank": pa.array([1, 2, 3, 1, 1], pa.int32()),
            # float32 BM25 scores widened to float64, plus values that need full precision
            "score": [float(pa.scalar(12.3456789, pa.float32()).as_py()), 7.25, 0.1 + 0.2, -1e-300, 3.0],
        },
        schema=RUN_SCHEMA,
    )


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "bm25.trec"
    table = run_rows()
    assert write_trec_run(table.to_batches(max_chunksize=2), path, tag="bm25") == 5
    lines = path.read_text().splitlines()
    assert lines[0].split() == ["q1", "Q0", "p9", "1", repr(table["score"][0].as_py()), "bm25"]
    back = read_trec_run(path)
    assert back.schema == RUN_SCHEMA
    key = [("question_id", "ascending"), ("rank", "ascending")]
    assert back.sort_by(key).equals(table.sort_by(key))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_import_rederives_ranks_from_scores(tmp_path: Path) -> None:
    path = tmp_path / "external.run"
    path.write_text(
        "q1 Q0 a 1 0.5 ext\n"
        "q1 Q0 b 2 0.9 ext\n"  # higher score than rank 1: trec_eval and ranx put it first
        "\n"
        "q1 0 c 7 0.5 ext\n"  # tie with a: file order decides; the Q0 column is ignored
        "q2 Q0 d 3 -2 ext\n"
    )
    rows = read_trec_run(path).to_pylist()
    assert [(r["question_id"], r["passage_id"], r["rank"]) for r in rows] == [
        ("q1", "b", 1),
        ("q1", "a", 2),
        ("q1", "c", 3),
        ("q2", "d", 1),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("q1 Q0 a 1 0.5\n", ":1: expected 6 fields"),
        ("q1 Q0 a 1 0.5 t\nq1 Q0 b one 0.4 t\n", ":2: rank 'one' must be an integer"),
        ("q1 Q0 a 1 nan t\n", ":1: rank '1' must be an integer and score 'nan' a finite number"),
        (
            "q1 Q0 a 1 0.5 t\nq1 Q0 a 2 0.4 t\n",
            ":2: passage 'a' listed again for question 'q1' (first at line 1)",
        ),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.run"
    path.write_text(content)
    with pytest.raises(TrecFormatError) as error:
        read_trec_run(path)
    assert str(error.value).startswith(str(path)) and message in str(error.value)


def test_ids_with_whitespace_are_refused_and_nothing_is_left(tmp_path: Path) -> None:
    table = pa.table(
        {"question_id": ["q 1"], "passage_id": ["p"], "rank": pa.array([1], pa.int32()), "score": [1.0]},
        schema=RUN_SCHEMA,
    )
    path = tmp_path / "out.trec"
    with pytest.raises(ValueError, match="question id 'q 1'"):
        write_trec_run([table], path, tag="x")
    with pytest.raises(ValueError, match="run tag"):
        write_trec_run([run_rows()], path, tag="two words")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content", ["", "\n\n", "# a run without results\n\n# nothing\n"])
def test_a_run_file_without_results_is_refused(tmp_path: Path, content: str) -> None:
    """`odqa import run` of an empty file reported 'done, rows: 0', and then no verb found the run."""
    path = tmp_path / "empty.trec"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TrecFormatError, match=rf"^{path}: no results \(an empty file"):
        read_trec_run(path)
    long = tmp_path / "late.trec"  # comments past the head check's lines, results after them
    long.write_text("# c\n" * 150 + "q1 Q0 p1 1 2.0 run\n", encoding="utf-8")
    assert read_trec_run(long, first_lines=100).num_rows == 0 and read_trec_run(long).num_rows == 1
