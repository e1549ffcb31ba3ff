"""Metrics equal hand-computed values on small runs."""

import math

import numpy as np
import pyarrow as pa
import pytest

from odqa.pipelines.evaluation.answers import AnswerMatcher
from odqa.pipelines.evaluation.metrics import (
    MetricValue,
    compare_runs,
    first_hit_ranks,
    mean_scores,
    metrics_table,
    paired_t_test,
    parse_ks,
    per_question_hits,
    qrels_from_questions,
    qrels_scores,
    recall_at_k,
    recall_curve,
    render_recall_plot,
)
from odqa.pipelines.evaluation.qrels_metrics import parse_qrels_metric

PASSAGES = {
    "p1": "Paris is the capital of France.",
    "p2": "Lyon is a city.",
    "p3": "The Eiffel Tower is in Paris.",
    "p4": "Berlin is the capital of Germany.",
    "p5": "Nothing relevant here.",
}


def run_table(rows: list[tuple[str, str, int]]) -> pa.Table:
    qids, pids, ranks = zip(*rows, strict=True)
    return pa.table(
        {
            "question_id": list(qids),
            "passage_id": list(pids),
            "rank": list(ranks),
            "score": [-float(r) for r in ranks],
        }
    )


def questions_table(rows: list[tuple[str, list[str], str | None]]) -> pa.Table:
    return pa.table(
        {
            "question_id": [r[0] for r in rows],
            "answers": pa.array([r[1] for r in rows], type=pa.list_(pa.string())),
            "relation": [r[2] for r in rows],
        }
    )


def values_by_key(values: list[MetricValue]) -> dict[tuple[str, str], float]:
    return {(v.metric, v.group): v.value for v in values}


def test_first_hit_and_recall_at_k_hand_computed() -> None:
    # q1: answer "Paris" first in p3 at rank 2 (p2 has no Paris)  -> hit at K>=2
    # q2: answer "Germany" in p4 at rank 1                        -> hit at K>=1
    # q3: answer "Madrid" nowhere                                 -> never
    # q4: no run rows at all                                      -> never (still counted)
    # q5: no answers                                              -> left out
    run = run_table(
        [
            ("q1", "p3", 2),
            ("q1", "p2", 1),
            ("q1", "p1", 3),  # rows out of order on purpose
            ("q2", "p4", 1),
            ("q2", "p1", 2),
            ("q3", "p5", 1),
            ("q3", "p2", 2),
            ("qX", "p1", 1),  # a question not in this question set: ignored
        ]
    )
    questions = questions_table(
        [
            ("q1", ["Paris"], None),
            ("q2", ["Germany"], None),
            ("q3", ["Madrid"], None),
            ("q4", ["Rome"], None),
            ("q5", [], None),
        ]
    )
    first = first_hit_ranks(run, questions, AnswerMatcher(PASSAGES))
    assert dict(zip(first["question_id"].to_pylist(), first["first_hit_rank"].to_pylist(), strict=True)) == {
        "q1": 2,
        "q2": 1,
        "q3": None,
        "q4": None,
    }
    got = values_by_key(recall_at_k(first, ks=(1, 2, 3)))
    assert got == {("R@1", ""): 1 / 4, ("R@2", ""): 2 / 4, ("R@3", ""): 2 / 4}
    np.testing.assert_allclose(recall_curve(first, 4), [0.25, 0.5, 0.5, 0.5])
    assert per_question_hits(first, ks=(1,))["R@1"] == {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0}
    # cutting the run at rank 1 changes q1 into a miss, as top-1 retrieval would
    cut = first_hit_ranks(run, questions, AnswerMatcher(PASSAGES), max_rank=1)
    assert cut["first_hit_rank"].to_pylist() == [None, 1, None, None]


def test_macro_and_micro_differ_on_unbalanced_relations() -> None:
    # relation A: 1 question, hit at rank 1;  relation B: 3 questions, one hit at rank 1.
    # micro R@1 = 2 hits / 4 questions = 0.5
    # macro R@1 = mean(A=1/1, B=1/3) = 2/3
    passages = {"a": "Paris", "b": "nothing"}
    run = run_table([("qa", "a", 1), ("qb1", "a", 1), ("qb2", "b", 1), ("qb3", "b", 1)])
    questions = questions_table(
        [("qa", ["Paris"], "A"), ("qb1", ["Paris"], "B"), ("qb2", ["Paris"], "B"), ("qb3", ["Paris"], "B")]
    )
    got = values_by_key(recall_at_k(first_hit_ranks(run, questions, AnswerMatcher(passages)), ks=(1,)))
    assert got == {
        ("R@1", ""): 0.5,
        ("macroR@1", ""): pytest.approx(2 / 3),
        ("R@1", "A"): 1.0,
        ("R@1", "B"): pytest.approx(1 / 3),
    }


def test_regex_mode_through_first_hits() -> None:
    passages = {"a": "It cost 1,000 dollars", "b": "It cost 10 dollars"}
    run = run_table([("q", "b", 1), ("q", "a", 2)])
    questions = questions_table([("q", [r"1,?000 dollars"], None)])
    first = first_hit_ranks(run, questions, AnswerMatcher(passages, mode="regex"), group_column=None)
    assert first["first_hit_rank"].to_pylist() == [2]


def test_bad_runs_are_rejected() -> None:
    questions = questions_table([("q", ["Paris"], None)])
    with pytest.raises(ValueError, match="start at 1"):
        first_hit_ranks(run_table([("q", "p1", 0)]), questions, AnswerMatcher(PASSAGES))
    with pytest.raises(ValueError, match="lacks column 'rank'"):
        first_hit_ranks(
            pa.table({"question_id": ["q"], "passage_id": ["p1"]}), questions, AnswerMatcher(PASSAGES)
        )
    with pytest.raises(KeyError, match="nope"):
        first_hit_ranks(run_table([("q", "nope", 1)]), questions, AnswerMatcher(PASSAGES))


def test_parse_ks() -> None:
    assert parse_ks("100,1, 5,20,5") == (1, 5, 20, 100)
    for bad in ("", "0,5", "a,b"):
        with pytest.raises(ValueError):
            parse_ks(bad)


def test_qrels_metrics_equal_hand_computed_values() -> None:
    # qrels: q1 -> {d1, d2}, q2 -> {d3}, q3 -> {d9} (never retrieved), q4 unjudged.
    # q1 ranking d1(rel) d5 d2(rel): AP = (1/1 + 2/3)/2 = 5/6, RR = 1, recall = 1, P@1 = 1,
    #   DCG@3 = 1/log2(2) + 1/log2(4) = 1.5, IDCG@2 = 1 + 1/log2(3); nDCG@3 = nDCG@10 = 1.5/IDCG
    # q2 ranking d4 d3(rel): AP = 1/2, RR = 1/2, recall 1, P@1 = 0, nDCG = (1/log2(3)) / 1
    # q3: nothing retrieved -> all zero. q4: unjudged -> dropped.
    questions = pa.table(
        {
            "question_id": ["q1", "q2", "q3", "q4"],
            "positive_ids": pa.array([["d1", "d2"], ["d3"], ["d9"], []], type=pa.list_(pa.string())),
        }
    )
    qrels = qrels_from_questions(questions)
    assert qrels == {"q1": {"d1": 1, "d2": 1}, "q2": {"d3": 1}, "q3": {"d9": 1}}
    # ranks decide the order even where scores disagree (q2's score favours d3)
    run = pa.table(
        {
            "question_id": ["q1", "q1", "q1", "q2", "q2", "q4"],
            "passage_id": ["d1", "d5", "d2", "d4", "d3", "d1"],
            "rank": [1, 2, 3, 1, 2, 1],
            "score": [3.0, 2.0, 1.0, 1.0, 9.0, 1.0],
        }
    )
    scores = qrels_scores(run, qrels)
    ndcg_q1 = 1.5 / (1 + 1 / math.log2(3))
    ndcg_q2 = 1 / math.log2(3)
    expected = {
        "MAP@100": {"q1": 5 / 6, "q2": 0.5, "q3": 0.0},
        "MRR@100": {"q1": 1.0, "q2": 0.5, "q3": 0.0},
        "MRR@10": {"q1": 1.0, "q2": 0.5, "q3": 0.0},
        "Recall@100": {"q1": 1.0, "q2": 1.0, "q3": 0.0},
        "nDCG@10": {"q1": ndcg_q1, "q2": ndcg_q2, "q3": 0.0},
        "P@1": {"q1": 1.0, "q2": 0.0, "q3": 0.0},
        "nDCG@3": {"q1": ndcg_q1, "q2": ndcg_q2, "q3": 0.0},
    }
    assert scores.keys() == expected.keys()
    for metric, per_q in expected.items():
        assert scores[metric] == pytest.approx(per_q), metric
    overall = values_by_key(mean_scores(scores))
    assert overall[("MAP@100", "")] == pytest.approx((5 / 6 + 0.5) / 3)
    assert overall[("P@1", "")] == pytest.approx(1 / 3)


def test_mrr_at_10_beside_mrr_at_100() -> None:
    """DESIRE-ME's paper reports MRR@100, its code MRR@10: a first hit at rank 11 counts in one only."""
    qrels = {"q1": {"d11": 1}, "q2": {"d3": 1}}
    ids = [f"d{r}" for r in range(1, 13)]
    run = pa.table({"question_id": ["q1"] * 12 + ["q2"] * 12, "passage_id": ids + ids,
                    "rank": list(range(1, 13)) * 2, "score": [1.0 / r for r in range(1, 13)] * 2})  # fmt: skip
    overall = values_by_key(mean_scores(qrels_scores(run, qrels)))
    assert overall[("MRR@100", "")] == pytest.approx((1 / 11 + 1 / 3) / 2)
    assert overall[("MRR@10", "")] == pytest.approx((0 + 1 / 3) / 2)


def test_metric_names() -> None:
    assert parse_qrels_metric("nDCG@10") == ("nDCG", 10)
    assert parse_qrels_metric("Recall@100") == ("Recall", 100)
    for bad in ("R@100", "nDCG@0", "ndcg@10"):  # an answer-based name, a zero cut-off, ranx's spelling
        with pytest.raises(ValueError, match="unknown qrels metric"):
            parse_qrels_metric(bad)
    with pytest.raises(ValueError, match="unknown qrels metric"):
        qrels_scores(pa.table({"question_id": ["q"], "passage_id": ["d"], "rank": [1]}), {"q": {"d": 1}}, ["R@5"])


def test_metrics_table_shape() -> None:
    table = metrics_table(
        [MetricValue("R@1", 0.5), MetricValue("R@1", 1.0, "P19")], run="bm25", dataset="nq", split="test"
    )
    assert table.column_names == ["run", "dataset", "split", "metric", "value", "group"]
    assert table.to_pylist()[1] == {
        "run": "bm25",
        "dataset": "nq",
        "split": "test",
        "metric": "R@1",
        "value": 1.0,
        "group": "P19",
    }


def test_paired_t_test_and_bonferroni() -> None:
    # hand computation: d = a - b = [0.1, 0.2, 0.3, 0.2]; mean 0.2, sd = sqrt(0.02/3)
    # t = 0.2 / (sd / 2) = 4.898979...; two-sided p with 3 dof = 0.016277 (t distribution table)
    a = np.array([0.5, 0.6, 0.9, 0.4])
    b = np.array([0.4, 0.4, 0.6, 0.2])
    t, p = paired_t_test(a, b)
    assert t == pytest.approx(0.2 / (math.sqrt(0.02 / 3) / 2))
    assert p == pytest.approx(0.016277, rel=1e-4)
    assert paired_t_test(a, a) == (0.0, 1.0)
    assert paired_t_test(np.array([2.0, 3.0, 4.0]), np.array([1.0, 2.0, 3.0])) == (math.inf, 0.0)
    qids = ["q1", "q2", "q3", "q4"]
    scores = {
        "x": {"M": dict(zip(qids, a, strict=True))},
        "y": {"M": dict(zip(qids, b, strict=True))},
        "z": {"M": dict(zip(qids, a, strict=True))},
    }
    table = compare_runs(scores, alpha=0.05).to_pylist()
    assert [(r["run_a"], r["run_b"]) for r in table] == [("x", "y"), ("x", "z"), ("y", "z")]
    xy = table[0]
    # 3 pairs -> p * 3 = 0.0488 < 0.05: still significant after correction
    assert xy["p_bonferroni"] == pytest.approx(3 * p) and xy["significant"]
    assert table[1]["p_value"] == 1.0 and not table[1]["significant"]
    with pytest.raises(ValueError, match="different questions"):
        compare_runs({"x": {"M": {"q1": 1.0}}, "y": {"M": {"q2": 1.0}}})
    with pytest.raises(ValueError, match="two runs"):
        compare_runs({"x": {"M": {"q1": 1.0}}})


def test_recall_plot_is_a_png() -> None:
    png = render_recall_plot({"bm25": np.array([0.2, 0.4, 0.5]), "dpr": np.array([0.4, 0.6, 0.7])})
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_recall_plot_text_fits_inside_the_saved_figure() -> None:
    """The compare plot's title (two long run names) and the y-axis label are not clipped: every
    text drawn in the saved image lies inside the figure."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    from odqa.pipelines.evaluation.metrics import recall_figure

    runs = ["dense-sde-squad24-train-round2-squad24-dev", "hybrid-sde-squad24-train-round2-alpha-1.3-squad24-dev"]
    figure = recall_figure({name: np.array([0.2, 0.4, 0.5]) for name in runs},
                           title="Top-K retrieval accuracy: " + " vs ".join(runs))  # fmt: skip
    canvas = FigureCanvasAgg(figure)
    figure.savefig(io.BytesIO(), format="png")  # lays the figure out and draws it, as saved
    renderer = canvas.get_renderer()
    box = figure.bbox
    ticks = {id(label) for axes in figure.axes
             for label in axes.get_xticklabels(which="both") + axes.get_yticklabels(which="both")}  # fmt: skip
    texts = [t for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip() and id(t) not in ticks]
    assert any(t.get_text().startswith("Top-K") for t in texts) and any("R@K" in t.get_text() for t in texts)
    for text in texts:  # title, axis labels, legend
        extent = text.get_window_extent(renderer)
        assert (extent.x0 >= box.x0 - 0.5 and extent.y0 >= box.y0 - 0.5 and extent.x1 <= box.x1 + 0.5
                and extent.y1 <= box.y1 + 0.5), f"{text.get_text()!r} at {extent} leaves the figure {box}"  # fmt: skip
    drawn = figure.get_tightbbox(renderer)  # inches; tick labels only where ticks are drawn
    assert drawn.x0 >= 0 and drawn.y0 >= 0 and drawn.x1 <= 6.4 and drawn.y1 <= 4.2, drawn
