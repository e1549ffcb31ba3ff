"""Retrieval metrics as the papers report them, plus paired significance tests and R@K plots.

Two families, with names that never collide in the `metrics` table:

* Answer-based top-K accuracy (DPR, TASER, EntityQuestions, the thesis): ``R@K`` is the
  fraction of questions with at least one passage among the top K that contains an answer
  (`answers.has_answer`). Rows with ``group == ""`` are the *micro* figure over all questions;
  with a group column (the relation for EntityQuestions / T-REx questions) every group gets its
  own ``R@K`` row (``group`` = the relation) and ``macroR@K`` (``group == ""``) is the unweighted
  mean of the per-group figures, the "average over relations" of EntityQuestions' accuracy.py.
  Questions without a group value count in the micro figure only.
* Relevance-judgment (qrels) metrics for BEIR-style data (DESIRE-ME section 4.1), computed as
  trec_eval does (`qrels_metrics`) from the questions' ``positive_ids``: ``MAP@100``,
  ``MRR@100`` (the paper) and ``MRR@10`` (DESIRE-ME's reference code, BEIR), ``Recall@100``,
  ``nDCG@10``, ``P@1``, ``nDCG@3``. Qrels recall is named ``Recall@K`` because ``R@K`` already
  means answer-based accuracy; only questions with judgments take part (BEIR convention).

The run's ``rank`` column is authoritative for both families (as if trec_eval got ``1/rank`` as
the score), so ties in retrieval scores cannot make the two families see different orders.

Comparisons use two-sided paired Student's t-tests on per-question scores (scipy's
``ttest_rel``, which is what ranx's "student" test runs) with a Bonferroni correction over the
number of run pairs compared per metric; ranx's own `compare` has no multiple-testing
correction, hence our own loop.
"""

from __future__ import annotations

import io
import itertools
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..retrieval.runs import ranked_lists
from .answers import AnswerMatcher
from .qrels_metrics import question_scores

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DEFAULT_KS: tuple[int, ...] = (1, 5, 20, 100)
# MRR@100 is DESIRE-ME's paper; MRR@10 is what its reference code (3_test.py) and BEIR report.
DEFAULT_QRELS_METRICS: tuple[str, ...] = ("MAP@100", "MRR@100", "MRR@10", "Recall@100", "nDCG@10", "P@1", "nDCG@3")

METRIC_ROW_SCHEMA = pa.schema(
    [
        pa.field("run", pa.string(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("group", pa.string(), nullable=False),
    ]
)
FIRST_HIT_SCHEMA = pa.schema(
    [
        pa.field("question_id", pa.string(), nullable=False),
        pa.field("first_hit_rank", pa.int32()),
        pa.field("group", pa.string()),
    ]
)


@dataclass(frozen=True)
class MetricValue:
    """One figure of one run: ``group == ""`` for the overall value."""

    metric: str
    value: float
    group: str = ""


def recall_name(k: int, *, macro: bool = False) -> str:
    return f"{'macro' if macro else ''}R@{k}"


def parse_ks(text: str) -> tuple[int, ...]:
    """``"1,5,20,100"`` -> (1, 5, 20, 100); cut-offs must be positive integers."""
    try:
        ks = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise ValueError(f"cut-offs must be comma-separated integers, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise ValueError(f"cut-offs must be positive integers, got {text!r}")
    return ks


def first_hit_ranks(
    run: pa.Table,
    questions: pa.Table,
    matcher: AnswerMatcher,
    *,
    max_rank: int | None = None,
    group_column: str | None = "relation",
) -> pa.Table:
    """Per question: the rank of the first retrieved passage containing an answer (null: none).

    ``questions`` needs ``question_id`` and ``answers`` (list of strings); questions without
    any answer are left out, because answer-based accuracy is undefined for them. Questions the
    run never retrieved for count as misses; run rows for other questions are ignored. The
    matcher's passages must cover every retrieved passage id (a ``KeyError`` names the first
    missing one). ``group`` holds ``group_column`` (e.g. the relation) when the table has it.
    """
    ranked = ranked_lists(run, max_rank)
    has_group = group_column is not None and group_column in questions.column_names
    qids = questions["question_id"].cast(pa.string()).to_pylist()
    answers = questions["answers"].to_pylist()
    groups = questions[group_column].to_pylist() if has_group else [None] * len(qids)
    out_qids, out_ranks, out_groups = [], [], []
    for qid, question_answers, group in zip(qids, answers, groups, strict=True):
        if not question_answers:
            continue
        passages = ranked.get(qid, [])
        hits = np.flatnonzero(matcher.hits(passages, question_answers)) if passages else []
        out_qids.append(qid)
        out_ranks.append(int(hits[0]) + 1 if len(hits) else None)
        out_groups.append(group if group else None)
    return pa.table([out_qids, out_ranks, out_groups], schema=FIRST_HIT_SCHEMA)


def _hit_matrix(first_hits: pa.Table, ks: Sequence[int]) -> np.ndarray:
    """Boolean (questions x ks): first hit within the top K."""
    ranks = first_hits["first_hit_rank"].to_numpy(zero_copy_only=False)
    ranks = np.where(np.isnan(ranks.astype(float)), np.inf, ranks.astype(float))
    return ranks[:, None] <= np.asarray(ks, dtype=float)[None, :]


def recall_at_k(first_hits: pa.Table, ks: Sequence[int] = DEFAULT_KS) -> list[MetricValue]:
    """Micro ``R@K`` over all questions, per-group ``R@K`` and ``macroR@K`` over groups."""
    if first_hits.num_rows == 0:
        raise ValueError("no questions with answers to evaluate")
    hits = _hit_matrix(first_hits, ks)
    values = [MetricValue(recall_name(k), float(hits[:, i].mean())) for i, k in enumerate(ks)]
    groups = np.array(first_hits["group"].to_pylist(), dtype=object)
    names = sorted({g for g in groups if g is not None})
    if names:
        per_group = {g: hits[groups == g].mean(axis=0) for g in names}
        for i, k in enumerate(ks):
            values.append(
                MetricValue(recall_name(k, macro=True), float(np.mean([per_group[g][i] for g in names])))
            )
            values.extend(MetricValue(recall_name(k), float(per_group[g][i]), g) for g in names)
    return values


def recall_curve(first_hits: pa.Table, max_k: int) -> np.ndarray:
    """R@k for k = 1..max_k (micro), the data behind the R@K-vs-K plot."""
    return _hit_matrix(first_hits, range(1, max_k + 1)).mean(axis=0)


def per_question_hits(first_hits: pa.Table, ks: Sequence[int] = DEFAULT_KS) -> dict[str, dict[str, float]]:
    """``R@K`` name -> question_id -> 1.0/0.0, the paired samples for significance tests."""
    hits = _hit_matrix(first_hits, ks)
    qids = first_hits["question_id"].to_pylist()
    return {recall_name(k): dict(zip(qids, hits[:, i].astype(float), strict=True)) for i, k in enumerate(ks)}


def qrels_from_questions(questions: pa.Table) -> dict[str, dict[str, int]]:
    """Binary relevance judgments from ``positive_ids``; questions without positives are left out."""
    qrels: dict[str, dict[str, int]] = {}
    qids = questions["question_id"].cast(pa.string()).to_pylist()
    for qid, positives in zip(qids, questions["positive_ids"].to_pylist(), strict=True):
        if positives:
            qrels[qid] = {str(pid): 1 for pid in positives}
    return qrels


def derived_judgments(questions: pa.Table) -> dict[str, int]:
    """How many questions' ``positive_ids`` were derived from their answers (``positives_from``,
    `odqa positives`), by what: judgments made by a retriever favour that retriever, so qrels
    metrics over them are reported with this."""
    if "positives_from" not in questions.column_names:
        return {}
    derived = Counter(origin for origin, ids in zip(questions["positives_from"].to_pylist(),
                                                    questions["positive_ids"].to_pylist(), strict=True) if origin and ids)
    return dict(sorted(derived.items()))


def qrels_scores(
    run: pa.Table, qrels: Mapping[str, Mapping[str, int]], metrics: Sequence[str] = DEFAULT_QRELS_METRICS
) -> dict[str, dict[str, float]]:
    """Per-question scores (`qrels_metrics`, trec_eval's definitions): our metric name ->
    question_id -> score.

    Judged questions missing from the run score 0 and unjudged run questions are dropped, as in
    BEIR evaluation (ranx's ``make_comparable``).
    """
    if not qrels:
        raise ValueError("no relevance judgments (positive_ids) to evaluate against")
    ranked = ranked_lists(run, None)
    scores: dict[str, dict[str, float]] = {name: {} for name in metrics}
    for qid, judged in qrels.items():
        for name, value in question_scores(ranked.get(qid, []), judged, metrics).items():
            scores[name][qid] = value
    return scores


def mean_scores(scores: Mapping[str, Mapping[str, float]]) -> list[MetricValue]:
    """Overall values (mean over questions) of per-question scores."""
    return [MetricValue(name, float(np.mean(list(per_q.values())))) for name, per_q in scores.items()]


def metrics_table(values: Sequence[MetricValue], *, run: str, dataset: str, split: str) -> pa.Table:
    """Rows shaped like the `metrics` table (without created_at/config, which the flow adds)."""
    return pa.table(
        {
            "run": [run] * len(values),
            "dataset": [dataset] * len(values),
            "split": [split] * len(values),
            "metric": [v.metric for v in values],
            "value": [v.value for v in values],
            "group": [v.group for v in values],
        },
        schema=METRIC_ROW_SCHEMA,
    )


COMPARISON_SCHEMA = pa.schema(
    [
        pa.field("metric", pa.string(), nullable=False),
        pa.field("run_a", pa.string(), nullable=False),
        pa.field("run_b", pa.string(), nullable=False),
        pa.field("questions", pa.int64(), nullable=False),
        pa.field("mean_a", pa.float64(), nullable=False),
        pa.field("mean_b", pa.float64(), nullable=False),
        pa.field("t_statistic", pa.float64(), nullable=False),
        pa.field("p_value", pa.float64(), nullable=False),
        pa.field("p_bonferroni", pa.float64(), nullable=False),
        pa.field("significant", pa.bool_(), nullable=False),
    ]
)


def paired_t_test(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Two-sided paired Student's t-test; (t, p).

    scipy returns NaN when all differences are equal; we resolve that limit explicitly:
    identical scores give (0, 1), a constant non-zero difference gives (+-inf, 0).
    """
    from scipy.stats import ttest_rel

    diff = a - b
    if np.all(diff == diff[0]):
        if diff[0] == 0:
            return 0.0, 1.0
        return float(np.sign(diff[0]) * np.inf), 0.0
    result = ttest_rel(a, b, alternative="two-sided")
    return float(result.statistic), float(result.pvalue)


def compare_runs(scores: Mapping[str, Mapping[str, Mapping[str, float]]], *, alpha: float = 0.05) -> pa.Table:
    """Paired t-tests between every pair of runs for every metric they share.

    ``scores``: run -> metric -> question_id -> score. Both runs of a pair must score the
    same questions (they are paired samples). p-values are Bonferroni-corrected by the number
    of pairs tested for that metric: ``p_bonferroni = min(1, p * pairs)``; ``significant`` is
    ``p_bonferroni < alpha``.
    """
    runs = list(scores)
    if len(runs) < 2:
        raise ValueError("comparing needs at least two runs")
    metric_names = [m for m in scores[runs[0]] if all(m in scores[r] for r in runs[1:])]
    pairs = list(itertools.combinations(runs, 2))
    rows: list[dict[str, object]] = []
    for metric in metric_names:
        for run_a, run_b in pairs:
            sa, sb = scores[run_a][metric], scores[run_b][metric]
            if sa.keys() != sb.keys():
                raise ValueError(
                    f"runs {run_a!r} and {run_b!r} scored different questions for {metric} "
                    f"({len(sa)} vs {len(sb)}); paired tests need the same questions"
                )
            qids = sorted(sa)
            a = np.array([sa[q] for q in qids], dtype=float)
            b = np.array([sb[q] for q in qids], dtype=float)
            t, p = paired_t_test(a, b)
            p_adj = min(1.0, p * len(pairs))
            rows.append(
                {
                    "metric": metric,
                    "run_a": run_a,
                    "run_b": run_b,
                    "questions": len(qids),
                    "mean_a": float(a.mean()),
                    "mean_b": float(b.mean()),
                    "t_statistic": t,
                    "p_value": p,
                    "p_bonferroni": p_adj,
                    "significant": p_adj < alpha,
                }
            )
    return pa.Table.from_pylist(rows, schema=COMPARISON_SCHEMA)


RECALL_Y_LABEL = "R@K: % of questions with an\nanswer in the top K passages"
TITLE_CHARS = 60  # a title line that fits the 6.4 in wide figure at the title's font size


def recall_figure(curves: Mapping[str, np.ndarray], *, title: str = "Top-K retrieval accuracy") -> Figure:
    """R@K against K (K = 1..len(curve)) for several runs, log-scaled K axis. The title is wrapped
    to the figure's width (a compare of long run names would run off it) and the layout leaves
    room for every label: nothing is clipped in the saved image."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    if not curves:
        raise ValueError("nothing to plot")
    figure = Figure(figsize=(6.4, 4.2), dpi=120, layout="constrained")
    axes = figure.subplots()
    for name, curve in curves.items():
        axes.plot(np.arange(1, len(curve) + 1), np.asarray(curve) * 100.0, label=name)
    axes.set_xscale("log")
    axes.set_xlabel("K (passages retrieved)")
    axes.set_ylabel(RECALL_Y_LABEL)
    axes.set_ylim(0, 100)
    axes.set_title(textwrap.fill(title, TITLE_CHARS, break_on_hyphens=False))
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="lower right")
    return figure


def render_recall_plot(curves: Mapping[str, np.ndarray], *, title: str = "Top-K retrieval accuracy") -> bytes:
    """PNG of `recall_figure`."""
    buffer = io.BytesIO()
    recall_figure(curves, title=title).savefig(buffer, format="png")
    return buffer.getvalue()
