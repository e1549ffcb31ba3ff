"""One title normalization for every source of the category graph.

Titles meet from four places: XML page titles, `[[Category:X]]` link targets, SQL dumps (which
store `Foo_bar` with underscores) and user-supplied domain files. They only join if they are
spelled the same way, so every title goes through `normalize_title` (scalar) or
`normalize_titles` (Arrow, same result) before it is used as a key. The rules are MediaWiki's:
HTML entities decoded, bidi marks dropped, underscores and Unicode space characters collapsed to
one space, leading/trailing spaces stripped, Unicode NFC, first letter upper-cased (English
Wikipedia is first-letter case-insensitive; a letter whose upper case is several characters,
like `ß`, stays as it is, as in MediaWiki).
"""

from __future__ import annotations

import html
import re
import unicodedata

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "NAMESPACE_NAMES",
    "normalize_title",
    "normalize_titles",
    "split_namespace",
    "strip_namespace_prefix",
]

# The characters MediaWiki treats as title spaces (Title::secureAndSplit), plus control spaces.
_SPACES = "_ \t\n\r\u00a0\u1680\u180e\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_SPACE_RUN = re.compile(f"[{_SPACES}]+")
_BIDI_MARKS = re.compile("[\u200e\u200f\u202a-\u202e]")

#: English Wikipedia's namespace numbers -> canonical names (the prefix of non-article titles).
NAMESPACE_NAMES: dict[int, str] = {
    0: "", 1: "Talk", 2: "User", 3: "User talk", 4: "Wikipedia", 5: "Wikipedia talk",
    6: "File", 7: "File talk", 8: "MediaWiki", 9: "MediaWiki talk", 10: "Template",
    11: "Template talk", 12: "Help", 13: "Help talk", 14: "Category", 15: "Category talk",
    100: "Portal", 101: "Portal talk", 118: "Draft", 119: "Draft talk",
    710: "TimedText", 711: "TimedText talk", 828: "Module", 829: "Module talk",
}  # fmt: skip
_NAMESPACE_BY_NAME = {name.lower(): ns for ns, name in NAMESPACE_NAMES.items() if name}
_NAMESPACE_BY_NAME.update({"image": 6, "wp": 4, "project": 4})


def _upper_first(first: str) -> str:
    upper = first.upper()
    return upper if len(upper) == 1 else first


def normalize_title(title: str) -> str:
    """The canonical spelling of a title (see the module docstring for the rules)."""
    if "&" in title:
        title = html.unescape(title)
    title = _BIDI_MARKS.sub("", title)
    title = _SPACE_RUN.sub(" ", title).strip(" ")
    if not title.isascii():
        title = unicodedata.normalize("NFC", title)
    return _upper_first(title[:1]) + title[1:]


def normalize_titles(titles: pa.Array | pa.ChunkedArray) -> pa.Array:
    """`normalize_title` over an Arrow string array, nulls kept.

    Each distinct value is normalized once (category names repeat millions of times in
    categorylinks); pure-ASCII values without entities go through Arrow kernels, the rest
    through `normalize_title` itself, so both paths give identical results.
    """
    if isinstance(titles, pa.ChunkedArray):
        titles = titles.combine_chunks() if titles.num_chunks else pa.array([], pa.string())
    if titles.type != pa.string():
        titles = titles.cast(pa.string())
    encoded = pc.dictionary_encode(titles)
    values = encoded.dictionary
    simple = pc.and_(pc.string_is_ascii(values), pc.invert(pc.match_substring(values, "&")))
    ascii_values = pc.filter(values, simple)
    ascii_values = pc.replace_substring_regex(ascii_values, "[_ \t\n\r]+", " ")
    ascii_values = pc.utf8_trim(ascii_values, " ")
    ascii_values = pc.binary_join_element_wise(
        pc.ascii_upper(pc.utf8_slice_codeunits(ascii_values, 0, 1)),
        pc.utf8_slice_codeunits(ascii_values, 1),
        "",
    )
    other = [normalize_title(v) for v in pc.filter(values, pc.invert(simple)).to_pylist()]
    merged = pc.replace_with_mask(values, pc.invert(simple), pa.array(other, pa.string()))
    merged = pc.replace_with_mask(merged, simple, ascii_values)
    return merged.take(encoded.indices)


def split_namespace(title: str) -> tuple[int, str]:
    """`("Category:Foo bar")` -> `(14, "Foo bar")`; titles without a known prefix are namespace 0."""
    prefix, sep, rest = title.partition(":")
    if sep:
        ns = _NAMESPACE_BY_NAME.get(normalize_title(prefix).lower())
        if ns is not None:
            return ns, normalize_title(rest)
    return 0, normalize_title(title)


def strip_namespace_prefix(title: str, namespace: int) -> str:
    """The title without its namespace prefix, e.g. ("Category:Foo", 14) -> "Foo"."""
    if namespace:
        ns, rest = split_namespace(title)
        if ns == namespace:
            return rest
    return normalize_title(title)
