"""DPR-style passages: consecutive, disjoint blocks of N words.

DPR (Karpukhin et al., 2020, section 4.1) split every cleaned article into disjoint 100-word
text blocks and kept the title apart; the last block of an article is simply shorter. Words
are whitespace-separated tokens, so joining an article's passages with single spaces gives
back its whitespace-normalized text exactly: nothing is lost or duplicated.
"""

from __future__ import annotations


def split_passages(text: str, words_per_passage: int = 100) -> list[str]:
    """Split ``text`` into blocks of ``words_per_passage`` words (the last may be shorter)."""
    if words_per_passage < 1:
        raise ValueError(f"words_per_passage must be >= 1, got {words_per_passage}")
    words = text.split()
    return [" ".join(words[i : i + words_per_passage]) for i in range(0, len(words), words_per_passage)]
