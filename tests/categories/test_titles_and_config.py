"""Title normalization (scalar == vectorized) and the domain file format."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from odqa.pipelines.categories.domain_config import (
    DEFAULT_HIDDEN_PREFIXES,
    DESIRE_ME_DOMAINS,
    DomainConfig,
    DomainConfigError,
    load_domain_config,
)
from odqa.pipelines.categories.titles import (
    normalize_title,
    normalize_titles,
    split_namespace,
    strip_namespace_prefix,
)

CASES = {
    "Foo_bar": "Foo bar",
    "  foo__bar  ": "Foo bar",
    "food_and\u00a0drink": "Food and drink",
    "e\u0301cole": "\u00c9cole",  # NFC: e + combining acute -> é, then upper-cased
    "\u00dfer": "\u00dfer",  # ß has no single-letter upper case: kept (as MediaWiki does)
    "AT&amp;T": "AT&T",
    "\u200eLeft-to-right mark": "Left-to-right mark",
    "": "",
    "x": "X",
    "1990s": "1990s",
    "\u00e9t\u00e9_2020": "\u00c9t\u00e9 2020",
}


@pytest.mark.parametrize(("raw", "expected"), CASES.items())
def test_normalize_title(raw: str, expected: str) -> None:
    assert normalize_title(raw) == expected


def test_vectorized_normalization_equals_scalar() -> None:
    raw = [*CASES, None, "foo_bar", "Foo bar", "a\tb", "_leading", "ǆemal", "ﬀ ligature", "Ωmega"]
    got = normalize_titles(pa.array(raw, pa.string())).to_pylist()
    assert got == [None if r is None else normalize_title(r) for r in raw]
    chunked = pa.chunked_array([pa.array(raw[:3]), pa.array(raw[3:])])
    assert normalize_titles(chunked).to_pylist() == got


def test_namespaces() -> None:
    assert split_namespace("Category:Foo_bar") == (14, "Foo bar")
    assert split_namespace("category : foo") == (14, "Foo")
    assert split_namespace("Star Wars: A New Hope") == (0, "Star Wars: A New Hope")
    assert strip_namespace_prefix("Category:Science", 14) == "Science"
    assert strip_namespace_prefix("Science", 14) == "Science"


def test_defaults_are_desire_me() -> None:
    config = DomainConfig()
    assert len(config.domains) == 39 and config.domains == DESIRE_ME_DOMAINS
    assert config.hidden_prefixes == DEFAULT_HIDDEN_PREFIXES
    assert config.hidden_parents == ("Hidden categories",)


def test_domain_file(tmp_path: Path) -> None:
    path = tmp_path / "domains.txt"
    path.write_text(
        "# my domains\nScience\nCategory:food_and_drink   # prefix and underscores allowed\n\n"
        "[hidden_prefixes]\nStub\n[hidden_categories]\nSecret things\n[hidden_parents]\n[settings]\nmax_depth = 4\n",
        encoding="utf-8",
    )
    config = load_domain_config(path)
    assert config.domains == ("Science", "Food and drink")
    assert config.hidden_prefixes == ("Stub",)
    assert config.hidden_categories == frozenset({"Secret things"})
    assert config.hidden_parents == ()
    assert config.max_depth == 4
    assert config.with_max_depth(7).max_depth == 7 and config.with_max_depth(None) is config


def test_domain_file_keeps_defaults_for_absent_sections(tmp_path: Path) -> None:
    path = tmp_path / "d.txt"
    path.write_text("History\n", encoding="utf-8")
    config = load_domain_config(path)
    assert config.domains == ("History",) and config.hidden_prefixes == DEFAULT_HIDDEN_PREFIXES


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[colours]\nred\n", r"d\.txt:1: unknown section \[colours\]"),
        ("Science\n[settings]\nmax_depth = deep\n", r"d\.txt:3: max_depth must be an integer"),
        ("Science\n[settings]\ndepth 3\n", r"d\.txt:3: expected `max_depth = N`"),
        ("Science\nscience\n", "duplicate domains"),
        ("[domains]\n", "need 1 to 64 domains"),
        ("Science\n[settings]\nmax_depth = 0\n", "max_depth must be >= 1"),
    ],
)
def test_domain_file_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "d.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DomainConfigError, match=message):
        load_domain_config(path)


def test_hidden_prefix_matches_at_word_boundary() -> None:
    import re

    regex = re.compile(DomainConfig().hidden_prefix_regex() or "")
    assert regex.search("Pages with broken file links")
    assert regex.search("CS1 maint: url-status")
    assert regex.search("Wikipedia")
    assert not regex.search("Pageants")
    assert not regex.search("Wikipedians")
    assert not regex.search("Science")
