"""Which categories are domains and which are never walked through (the labeller's settings).

File format (UTF-8 text, one value per line, `#` starts a comment, blank lines ignored):

    # lines before any section header are domains
    Science
    Category:History          # the "Category:" prefix is optional
    [hidden_prefixes]         # a section replaces that list's default
    All articles
    CS1
    [hidden_categories]       # exact category names to skip
    Articles lacking sources
    [hidden_parents]          # categories whose member categories are hidden
    Hidden categories
    [settings]
    max_depth = 8

Sections: `domains`, `hidden_prefixes`, `hidden_categories`, `hidden_parents`, `settings` (only
`max_depth`). A section that is absent keeps its default; an empty section means "none".
Names go through `normalize_title`, so `Food_and_drink` and `food and drink` are the same domain.
A hidden prefix matches at a word boundary: `Pages` hides "Pages with broken file links" but not
"Pageants".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from .titles import normalize_title, strip_namespace_prefix

__all__ = [
    "DEFAULT_HIDDEN_PARENTS",
    "DEFAULT_HIDDEN_PREFIXES",
    "DESIRE_ME_DOMAINS",
    "MAX_DOMAINS",
    "DomainConfig",
    "DomainConfigError",
    "load_domain_config",
    "parse_domain_config",
]

#: DESIRE-ME's top-level categories (Wikipedia's "Main topic classifications").
DESIRE_ME_DOMAINS: tuple[str, ...] = (
    "Academic disciplines", "Business", "Communication", "Concepts", "Culture", "Economy",
    "Education", "Energy", "Engineering", "Entertainment", "Entities", "Ethics", "Food and drink",
    "Geography", "Government", "Health", "History", "Human behavior", "Humanities", "Information",
    "Internet", "Knowledge", "Language", "Law", "Life", "Mass media", "Mathematics", "Military",
    "Nature", "People", "Philosophy", "Politics", "Religion", "Science", "Society", "Sports",
    "Technology", "Time", "Universe",
)  # fmt: skip
#: Maintenance and tracking categories: they group pages by editorial state, not by topic.
DEFAULT_HIDDEN_PREFIXES: tuple[str, ...] = (
    "All articles", "Articles with", "CS1", "Wikipedia", "Webarchive", "Pages", "Short description",
)  # fmt: skip
#: `__HIDDENCAT__` files a category under "Hidden categories", so its members are hidden ones.
DEFAULT_HIDDEN_PARENTS: tuple[str, ...] = ("Hidden categories",)
#: Domains are carried as bits of a uint64 per category.
MAX_DOMAINS = 64

_SECTIONS = ("domains", "hidden_prefixes", "hidden_categories", "hidden_parents", "settings")
_SECTION = re.compile(r"\[\s*([A-Za-z_]+)\s*\]\Z")


class DomainConfigError(ValueError):
    """A bad domain file: names the file and line."""


def _category_name(name: str) -> str:
    return strip_namespace_prefix(name, 14)


@dataclass(frozen=True)
class DomainConfig:
    """Labeller settings; names are normalized on construction."""

    domains: tuple[str, ...] = DESIRE_ME_DOMAINS
    hidden_prefixes: tuple[str, ...] = DEFAULT_HIDDEN_PREFIXES
    hidden_categories: frozenset[str] = field(default_factory=frozenset)
    hidden_parents: tuple[str, ...] = DEFAULT_HIDDEN_PARENTS
    max_depth: int = 10

    def __post_init__(self) -> None:
        domains = tuple(_category_name(d) for d in self.domains)
        if not 1 <= len(domains) <= MAX_DOMAINS:
            raise DomainConfigError(f"need 1 to {MAX_DOMAINS} domains, got {len(domains)}")
        duplicates = sorted({d for d in domains if domains.count(d) > 1})
        if duplicates:
            raise DomainConfigError(f"duplicate domains after normalization: {duplicates}")
        if self.max_depth < 1:
            raise DomainConfigError(
                f"max_depth must be >= 1 (an article's own categories), got {self.max_depth}"
            )
        object.__setattr__(self, "domains", domains)
        object.__setattr__(
            self, "hidden_prefixes", tuple(normalize_title(p) for p in self.hidden_prefixes if p.strip())
        )
        object.__setattr__(
            self, "hidden_categories", frozenset(_category_name(c) for c in self.hidden_categories)
        )
        object.__setattr__(self, "hidden_parents", tuple(_category_name(c) for c in self.hidden_parents))

    def with_max_depth(self, max_depth: int | None) -> DomainConfig:
        return self if max_depth is None else replace(self, max_depth=max_depth)

    def hidden_prefix_regex(self) -> str | None:
        """An RE2/Python regex matching names that start with a hidden prefix at a word boundary."""
        if not self.hidden_prefixes:
            return None
        alternatives = "|".join(re.escape(p) for p in self.hidden_prefixes)
        return f"^(?:{alternatives})(?:$|[^0-9A-Za-z])"


def parse_domain_config(text: str, source: str = "<config>") -> DomainConfig:
    """Parse the file format in the module docstring."""
    values: dict[str, list[str]] = {}
    section = "domains"
    max_depth: int | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        header = _SECTION.match(line)
        if header:
            section = header.group(1).lower()
            if section not in _SECTIONS:
                raise DomainConfigError(
                    f"{source}:{number}: unknown section [{section}]; expected one of {_SECTIONS}"
                )
            values.setdefault(section, [])
            continue
        if section == "settings":
            key, sep, value = (part.strip() for part in line.partition("="))
            if key != "max_depth" or not sep:
                raise DomainConfigError(
                    f"{source}:{number}: expected `max_depth = N` in [settings], got {line!r}"
                )
            try:
                max_depth = int(value)
            except ValueError:
                raise DomainConfigError(
                    f"{source}:{number}: max_depth must be an integer, got {value!r}"
                ) from None
            continue
        values.setdefault(section, []).append(line)
    kwargs: dict = {}
    if "domains" in values:
        kwargs["domains"] = tuple(values["domains"])
    if "hidden_prefixes" in values:
        kwargs["hidden_prefixes"] = tuple(values["hidden_prefixes"])
    if "hidden_categories" in values:
        kwargs["hidden_categories"] = frozenset(values["hidden_categories"])
    if "hidden_parents" in values:
        kwargs["hidden_parents"] = tuple(values["hidden_parents"])
    if max_depth is not None:
        kwargs["max_depth"] = max_depth
    try:
        return DomainConfig(**kwargs)
    except DomainConfigError as exc:
        raise DomainConfigError(f"{source}: {exc}") from None


def load_domain_config(path: str | Path) -> DomainConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DomainConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_domain_config(text, str(path))
