"""Answer matching with the rules of DPR's retriever evaluation.

Every top-K retrieval accuracy in the papers we reproduce (DPR, TASER, EntityQuestions and the
thesis built on it) counts a retrieved passage as correct when its text contains one of the
question's answers under DPR's rules. Our R@K is comparable with the published tables only if
we apply exactly those rules, so this module reimplements them (learned from DPR's
`has_answer` / `SimpleTokenizer` and EntityQuestions' `string_match`):

string mode (NQ, TriviaQA, WebQuestions, EntityQuestions, T-REx questions):
  1. Unicode NFD normalisation of passage and answer. Composed and decomposed spellings of an
     accented letter become the same code points; accents are *kept* ("Café" != "Cafe").
  2. DPR's simple tokenizer: a token is a maximal run of letters, digits and combining marks
     (``\\p{L}\\p{N}\\p{M}``) or any other single character that is neither a separator
     (``\\p{Z}``) nor an "other" character (``\\p{C}``: controls, soft hyphen, zero-width space).
     Punctuation becomes one-character tokens, whitespace and ``\\p{C}`` characters vanish.
  3. Lower-casing of every token.
  4. A hit when the answer's tokens occur contiguously in the passage's tokens.

regex mode (CuratedTREC): the NFD answer is a pattern searched in the NFD passage text with
IGNORECASE | UNICODE | MULTILINE (the `regex` module, as in DPR); a pattern that does not
compile matches nothing.

One deliberate difference from DPR: an answer without any token (empty or blank) matches every
passage in DPR, because an empty token list is found at position 0 of any passage. Here it
matches nothing: a blank answer is a data error and must not inflate accuracy.

DPR matches the passage *text*; the title is not part of it. Callers that want the title
included (DPR's optional ``use_title``) pass ``title + " . " + text`` themselves.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Hashable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Literal

import numpy as np
import regex

from ...storage.choices import MATCH_CHOICES

MatchMode = Literal["string", "regex"]
MATCH_MODES: tuple[MatchMode, ...] = ("string", "regex")

_FLAGS = regex.IGNORECASE | regex.UNICODE | regex.MULTILINE
_TOKEN = regex.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]", flags=_FLAGS)


def normalize_answer_text(text: str) -> str:
    """Unicode NFD, the only normalisation DPR applies before tokenizing or regex search."""
    return unicodedata.normalize("NFD", text)


def answer_tokens(text: str) -> list[str]:
    """DPR's simple-tokenizer words of ``text`` after NFD, lower-cased token by token."""
    return [match.group().lower() for match in _TOKEN.finditer(normalize_answer_text(text))]


def _token_form(text: str) -> str:
    """Tokens joined by single spaces and padded with a space on both sides.

    No token can contain a space (separators are excluded from both token classes and
    ``str.lower`` never produces one), so a token sequence A occurs contiguously in B exactly
    when ``form(A)`` is a substring of ``form(B)``; the padding pins matches to token
    boundaries ("paris" is not found in "parisian"). This turns DPR's sliding-window list
    comparison into one C-level substring search. Returns "" when there are no tokens.
    """
    tokens = answer_tokens(text)
    return f" {' '.join(tokens)} " if tokens else ""


@lru_cache(maxsize=65536)
def _answer_form(answer: str) -> str:
    return _token_form(answer)


@lru_cache(maxsize=65536)
def _answer_pattern(answer: str) -> regex.Pattern[str] | None:
    try:
        return regex.compile(normalize_answer_text(answer), flags=_FLAGS)
    except regex.error:
        return None


def _check_mode(mode: str) -> None:
    if mode not in MATCH_MODES:
        raise ValueError(f"answer match mode must be one of {MATCH_MODES}, got {mode!r}")


class _PreparedAnswers:
    """One question's answers in the form the chosen mode compares against."""

    def __init__(self, answers: Sequence[str] | str, mode: MatchMode) -> None:
        if isinstance(answers, str):
            raise TypeError("answers must be a sequence of strings, not a single string")
        _check_mode(mode)
        self.mode = mode
        if mode == "string":
            self.forms = [form for form in map(_answer_form, answers) if form]
            self.patterns: list[regex.Pattern[str]] = []
        else:
            self.forms = []
            self.patterns = [p for p in map(_answer_pattern, answers) if p is not None]

    def found_in(self, passage_form: str) -> bool:
        if self.mode == "string":
            return any(form in passage_form for form in self.forms)
        return any(pattern.search(passage_form) is not None for pattern in self.patterns)


def passage_form(text: str, mode: MatchMode = "string") -> str:
    """What a passage is compared as: its token form (string mode) or NFD text (regex mode)."""
    _check_mode(mode)
    return _token_form(text) if mode == "string" else normalize_answer_text(text)


def has_answer(text: str, answers: Sequence[str], mode: MatchMode = "string") -> bool:
    """True when ``text`` contains one of ``answers`` under DPR's rules (see module docstring)."""
    prepared = _PreparedAnswers(answers, mode)
    return prepared.found_in(passage_form(text, mode))


def has_answer_many(texts: Iterable[str], answers: Sequence[str], mode: MatchMode = "string") -> np.ndarray:
    """``has_answer`` for many passages against one answer list, preparing the answers once."""
    prepared = _PreparedAnswers(answers, mode)
    return np.fromiter((prepared.found_in(passage_form(t, mode)) for t in texts), dtype=bool)


class AnswerMatcher:
    """Matches many questions' answers against passages, preparing each passage only once.

    Evaluating a run checks a passage against the answers of every question that retrieved it,
    and popular passages appear in thousands of top-100 lists; NFD + tokenization is the costly
    part, so each passage's match form is computed on first use and kept by passage id.
    """

    def __init__(self, passages: Mapping[Hashable, str], mode: MatchMode = "string") -> None:
        _check_mode(mode)
        self.mode: MatchMode = mode
        self._texts = passages
        self._forms: dict[Hashable, str] = {}

    def _form(self, passage_id: Hashable) -> str:
        form = self._forms.get(passage_id)
        if form is None:
            try:
                text = self._texts[passage_id]
            except KeyError:
                raise KeyError(f"passage {passage_id!r} has no text to match answers against") from None
            form = self._forms[passage_id] = passage_form(text, self.mode)
        return form

    def has_answer(self, passage_id: Hashable, answers: Sequence[str]) -> bool:
        return _PreparedAnswers(answers, self.mode).found_in(self._form(passage_id))

    def hits(self, passage_ids: Sequence[Hashable], answers: Sequence[str]) -> np.ndarray:
        """Boolean array: does each passage (in the given order) contain one of ``answers``."""
        prepared = _PreparedAnswers(answers, self.mode)
        return np.fromiter(
            (prepared.found_in(self._form(p)) for p in passage_ids), dtype=bool, count=len(passage_ids)
        )

    def first(self, passage_ids: Sequence[Hashable], answers: Sequence[str], count: int, *,
              containing: bool) -> list[Hashable]:  # fmt: skip
        """The first ``count`` of ``passage_ids`` (in their order) that contain one of ``answers``
        (``containing``) or contain none of them (hard negatives). Passages are looked at
        ``count`` at a time, so a long ranking is prepared only as far as it is needed."""
        chosen: list[Hashable] = []
        for start in range(0, len(passage_ids), count):
            window = passage_ids[start : start + count]
            chosen.extend(p for p, hit in zip(window, self.hits(window, answers), strict=True) if hit == containing)
            if len(chosen) >= count:
                break
        return chosen[:count]


def match_mode(dataset: str, match: str = "auto") -> MatchMode:
    """`auto`: DPR's regex mode for CuratedTREC (its answers are patterns), string otherwise."""
    if match not in MATCH_CHOICES:
        raise ValueError(f"answer matching must be one of {MATCH_CHOICES}, got {match!r}")
    if match == "auto":
        return "regex" if "trec" in dataset.lower() else "string"
    return match  # type: ignore[return-value]
