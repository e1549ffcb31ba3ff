"""DPR-style passage splitting invariants."""

from __future__ import annotations

import random

import pytest

from odqa.pipelines.wikipedia.passages import split_passages


@pytest.mark.parametrize("words_per_passage", [1, 3, 100])
def test_blocks_rebuild_the_text_and_respect_the_size(words_per_passage: int) -> None:
    rng = random.Random(words_per_passage)
    for _ in range(50):
        words = ["".join(rng.choices("abcdé.,", k=rng.randint(1, 8))) for _ in range(rng.randint(0, 350))]
        seps = [rng.choice([" ", "  ", "\n", "\t", " \n "]) for _ in words]
        text = "".join(w + s for w, s in zip(words, seps, strict=True))
        blocks = split_passages(text, words_per_passage)
        assert " ".join(blocks) == " ".join(text.split())
        assert all(len(b.split()) == words_per_passage for b in blocks[:-1])
        assert all(0 < len(b.split()) <= words_per_passage for b in blocks)
        assert len(blocks) == -(-len(words) // words_per_passage)


def test_exact_split() -> None:
    text = " ".join(str(i) for i in range(250))
    blocks = split_passages(text)
    assert [len(b.split()) for b in blocks] == [100, 100, 50]
    assert blocks[1].split()[0] == "100"


def test_empty_and_invalid() -> None:
    assert split_passages("") == []
    assert split_passages(" \n\t ") == []
    with pytest.raises(ValueError, match="words_per_passage must be >= 1"):
        split_passages("a b", 0)
