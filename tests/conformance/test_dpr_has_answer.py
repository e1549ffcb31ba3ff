"""Answer matching equals DPR's `has_answer` (facebookresearch/DPR `dpr/data/qa_validation.py` with
its `SimpleTokenizer`), on hand-picked tricky cases (NFD, combining marks, soft hyphen and other
\\p{C} characters, no-break space, dotted I, sharp s, final sigma, CJK runs, punctuation tokens,
regex mode) and 200 seeded random strings from the same alphabet."""

from __future__ import annotations

import numpy as np

from odqa.pipelines.evaluation.answers import AnswerMatcher, has_answer, has_answer_many

from .conftest import reference_figures

CASES = reference_figures("dpr_has_answer.json")


def _expected(case: dict) -> bool:
    """DPR's answer, except the documented difference: an answer without any token matches every
    passage in DPR and none in odqa, so odqa gives DPR's answer for the other answers."""
    return case.get("dpr_without_blank_answers", case["dpr"])


def test_the_fixture_holds_both_kinds_and_the_documented_difference():
    assert len(CASES) > 200
    assert {c["dpr"] for c in CASES} == {True, False}
    blank = [c for c in CASES if "blank_answers" in c]
    assert blank and all(c["dpr"] for c in blank)  # DPR: a blank answer is found everywhere


def test_has_answer_equals_dprs():
    differ = [(c["passage"], c["answers"], c["mode"]) for c in CASES
              if has_answer(c["passage"], c["answers"], c["mode"]) != _expected(c)]  # fmt: skip
    assert differ == []


def test_the_batch_paths_give_the_same_answers():
    for case in CASES:
        many = has_answer_many([case["passage"], "unrelated filler"], case["answers"], case["mode"])
        assert bool(many[0]) == _expected(case)
    string_cases = [c for c in CASES if c["mode"] == "string"]
    matcher = AnswerMatcher({str(i): c["passage"] for i, c in enumerate(string_cases)})
    found = np.array([matcher.has_answer(str(i), c["answers"]) for i, c in enumerate(string_cases)])
    np.testing.assert_array_equal(found, [_expected(c) for c in string_cases])
