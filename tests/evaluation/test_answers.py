"""Our answer matching against the behaviour of DPR's published `has_answer`.

Each expected value is derived by walking DPR's code (dpr/data/qa_validation.py `has_answer`,
`_normalize`; dpr/utils/tokenizers.py `SimpleTokenizer`), abbreviated in the comments as:
  NFD      -- `_normalize` = unicodedata.normalize("NFD", ...) on passage and answer
  TOK      -- SimpleTokenizer: tokens are runs of [\\p{L}\\p{N}\\p{M}] or one [^\\p{Z}\\p{C}] char
  LOWER    -- `words(uncased=True)` lower-cases each token
  WINDOW   -- hit iff answer tokens == text tokens[i:i+len(answer)] for some i
  REGEX    -- regex mode: re.compile(NFD(answer), IGNORECASE|UNICODE|MULTILINE).search(NFD(text)),
              compile errors -> no match
"""

import unicodedata

import numpy as np
import pytest

from odqa.pipelines.evaluation.answers import (
    AnswerMatcher,
    answer_tokens,
    has_answer,
    has_answer_many,
    normalize_answer_text,
)

STRING_CASES = [
    # --- casing: LOWER applies to both sides
    ("The capital is PARIS.", ["paris"], True),
    ("the capital is paris", ["Paris"], True),
    # --- partial tokens: WINDOW compares whole tokens, "parisian" != "paris"
    ("A Parisian cafe", ["Paris"], False),
    ("the arts faculty", ["art"], False),
    ("1990s music", ["1990"], False),
    # --- passage edges: WINDOW ranges i over 0..len(text)-len(answer) inclusive
    ("Paris is big", ["Paris"], True),
    ("it is Paris", ["Paris"], True),
    ("Paris", ["Paris"], True),
    ("Paris", ["Paris France"], False),  # answer longer than text: empty range
    # --- multi-token answers must be contiguous and in order
    ("Barack Hussein Obama", ["Barack Obama"], False),
    ("Obama Barack", ["Barack Obama"], False),
    ("Barack  \n Obama", ["barack obama"], True),  # whitespace is not a token (\p{Z}, \p{C})
    # --- punctuation: each punctuation char is its own TOK token
    ("He left the U.S. in 1990.", ["U.S."], True),
    ("He left the U.S. in 1990.", ["U.S"], True),  # [u . s] is a prefix window of [u . s .]
    ("He left the U.S. in 1990.", ["US"], False),  # one token "us" never appears
    ("He left the U. S. in 1990.", ["U.S."], True),  # spaces between tokens do not matter
    ("Paris, France", ["Paris France"], False),  # the "," token sits between them
    ("Paris, France", ["Paris ,France"], True),
    ("O'Brien won", ["O Brien"], False),  # "'" is a token between o and brien
    ("O'Brien won", ["O'Brien"], True),
    ("Guns N' Roses", ["Guns N Roses"], False),
    ("x_y", ["x y"], False),  # "_" is \p{Pc}: not alphanumeric, so its own token
    # --- hyphens: "-" is a separate token, so hyphenated != spaced
    ("Jean-Paul Sartre", ["Jean Paul Sartre"], False),
    ("Jean Paul Sartre", ["Jean-Paul Sartre"], False),
    ("Jean - Paul Sartre", ["Jean-Paul Sartre"], True),
    ("Jean-Paul Sartre", ["Sartre"], True),
    ("Jean-Paul Sartre", ["Paul"], True),  # "paul" is a token of its own after "-"
    ("Jean\u2013Paul", ["Jean-Paul"], False),  # en dash is a different token than "-"
    # soft hyphen U+00AD is \p{Cf} (in \p{C}): it vanishes and splits the word in two
    ("Wiki\u00adpedia", ["Wikipedia"], False),
    ("Wiki\u00adpedia", ["Wiki pedia"], True),
    # --- numbers: digits are \p{N}, separators are tokens of their own
    ("a population of 1,000,000 people", ["1,000,000"], True),
    ("a population of 1,000,000 people", ["1000000"], False),
    ("a population of 1,000,000 people", ["000"], True),  # "000" is a whole token
    ("pi is 3.14159", ["3.14"], False),  # tokens [3 . 14159]: "14" != "14159"
    ("pi is 3.14159", ["3.14159"], True),
    ("in 1969", ["1,969"], False),
    ("the 2nd of May", ["2nd"], True),  # letters and digits form one run
    ("the 2nd of May", ["2"], False),
    # superscript two is \p{No}: part of the token, so "km" alone is not a token
    ("area 10 km\u00b2", ["km"], False),
    # --- accents: NFD makes composed == decomposed, but marks stay (\p{M} is in the token run)
    ("Caf\u00e9 de Flore", ["Cafe\u0301 de Flore"], True),
    ("Cafe\u0301 de Flore", ["Caf\u00e9 de Flore"], True),
    ("Caf\u00e9 de Flore", ["Cafe de Flore"], False),
    ("Cafe de Flore", ["Caf\u00e9 de Flore"], False),
    ("\u00c9COLE normale", ["\u00e9cole"], True),  # NFD(É)=E+U+0301, LOWER -> e+U+0301
    ("Antonín Dvořák", ["antonín dvořák"], True),
    ("Antonín Dvořák", ["Antonin Dvorak"], False),
    # "İ" NFD -> "I"+U+0307, lower -> "i"+U+0307: a different token than "istanbul"
    ("\u0130stanbul", ["istanbul"], False),
    ("stra\u00dfe", ["strasse"], False),  # str.lower keeps ß; no case folding to "ss"
    ("\ufb01nal", ["final"], False),  # NFD does not decompose the "fi" ligature (NFKD would)
    ("\u5317\u4eac\u5e02", ["\u5317\u4eac"], False),  # CJK run is one \p{L} token
    ("\u5317\u4eac\u5e02", ["\u5317\u4eac\u5e02"], True),
    # --- several answers: any one is enough
    ("Paris is in France", ["Lyon", "France"], True),
    ("Paris is in France", ["Lyon", "Marseille"], False),
    # --- no answers at all: nothing to find
    ("Paris", [], False),
]


@pytest.mark.parametrize(("text", "answers", "expected"), STRING_CASES)
def test_string_mode_agrees_with_dpr(text: str, answers: list[str], expected: bool) -> None:
    assert has_answer(text, answers) is expected
    assert has_answer(text, answers, mode="string") is expected


def test_tokenizer_reproduces_dpr_simple_tokenizer() -> None:
    # TOK + LOWER: punctuation single chars, whitespace/\p{C} dropped, marks kept in the run.
    expected = ["jean", "-", "paul", ",", "u", ".", "s", ".", "a", ".", "1", ",", "000", "cafe\u0301", "!"]
    assert answer_tokens("Jean-Paul, U.S.A. 1,000 Caf\u00e9!") == expected
    assert answer_tokens(" \t\n ") == []


def test_normalize_is_nfd() -> None:
    assert normalize_answer_text("Caf\u00e9") == "Cafe\u0301"
    assert normalize_answer_text("Cafe\u0301") == unicodedata.normalize("NFD", "Caf\u00e9")


def test_blank_answer_matches_nothing_unlike_dpr() -> None:
    # DPR: tokens([]) gives range(0, len(text)+1) with [] == text[0:0] -> True for any text.
    # We deliberately deviate (see module docstring): blank answers never count as hits.
    assert has_answer("anything at all", [""]) is False
    assert has_answer("anything at all", ["  ", "\n"]) is False
    assert has_answer("anything at all", ["", "all"]) is True


REGEX_CASES = [
    # REGEX: case-insensitive search anywhere in the raw (untokenized) NFD text
    ("The answer is 1,000 dollars.", [r"1,?000 dollars"], True),
    ("The answer is 1000 DOLLARS.", [r"1,?000 dollars"], True),
    ("The answer is 10000 dollars.", [r"\b1,?000 dollars"], False),
    # no tokenization: a regex matches inside a word, unlike string mode
    ("A Parisian cafe", [r"paris"], True),
    ("Jean-Paul Sartre", [r"jean.paul"], True),
    # MULTILINE: ^ and $ anchor at line starts/ends
    ("first line\nGeorge Washington\nlast", [r"^george washington$"], True),
    ("first line George Washington last", [r"^george washington$"], False),
    # NFD on both sides: a composed pattern finds a decomposed text
    ("Cafe\u0301 de Flore", ["caf\u00e9"], True),
    ("Caf\u00e9 de Flore", ["cafe"], True),  # NFD text starts with "Cafe" + U+0301
    ("Caf\u00e9 de Flore", [r"cafe\b"], False),  # U+0301 is a word character: no boundary
    # a pattern that does not compile matches nothing, the others are still tried
    ("Paris", ["(unclosed"], False),
    ("Paris", ["(unclosed", "par+is"], True),
    # \p classes work because DPR (and we) use the `regex` module
    ("Paris 75001", [r"\p{N}{5}"], True),
]


@pytest.mark.parametrize(("text", "answers", "expected"), REGEX_CASES)
def test_regex_mode_agrees_with_dpr(text: str, answers: list[str], expected: bool) -> None:
    assert has_answer(text, answers, mode="regex") is expected


def test_unknown_mode_and_single_string_answers_are_rejected() -> None:
    with pytest.raises(ValueError, match="mode"):
        has_answer("Paris", ["Paris"], mode="fuzzy")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sequence"):
        has_answer("Paris", "Paris")  # type: ignore[arg-type]


def test_many_and_matcher_agree_with_single_calls() -> None:
    texts = {case_id: case[0] for case_id, case in enumerate(STRING_CASES)}
    answers = ["Paris", "U.S.", "1,000,000", "Caf\u00e9 de Flore"]
    expected = np.array([has_answer(t, answers) for t in texts.values()])
    np.testing.assert_array_equal(has_answer_many(texts.values(), answers), expected)
    matcher = AnswerMatcher(texts)
    ids = list(texts)
    np.testing.assert_array_equal(matcher.hits(ids, answers), expected)
    # a second question reuses the cached passage forms and still gets its own answers
    np.testing.assert_array_equal(
        matcher.hits(ids, ["Sartre"]), np.array([has_answer(t, ["Sartre"]) for t in texts.values()])
    )
    assert matcher.has_answer(ids[0], ["paris"]) is True
    with pytest.raises(KeyError, match="no text"):
        matcher.hits(["missing"], answers)


def test_regex_matcher() -> None:
    matcher = AnswerMatcher({"a": "first line\nGeorge Washington", "b": "Washington George"}, mode="regex")
    np.testing.assert_array_equal(matcher.hits(["a", "b"], [r"^george"]), [True, False])
