"""Linear scanners that cut the bulky, non-prose parts out of wikitext before parsing.

Why a pre-pass: mwparserfromhell builds a Python object per node, so parsing a full article
(infobox, citation templates, reference lists, tables) costs about 1.3 s/MB and its
``strip_code`` still leaves ``thumb|``, ``Category:`` and table remnants. Templates,
references, tables, comments and file/category/interlanguage links make up roughly half the
bytes and most of the nodes of a typical article, and none of them is prose, so they are
located here with ``re``/``str.find`` scanners (one pass each, nesting handled with a stack)
and deleted; the parser then only sees the prose that remains.

Every function takes and returns ``str`` and never leaves an unmatched ``{{``, ``}}``,
``[[`` or ``]]`` behind: unbalanced delimiters are deleted as stray markup.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Span = tuple[int, int, str]  # (start, end, replacement)

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_NOWIKI_WORD = re.compile("<nowiki", re.IGNORECASE)  # "<" first: a fast literal scan
_NOWIKI = re.compile(r"<nowiki\s*>(.*?)</nowiki\s*>|<nowiki\s*/>", re.IGNORECASE | re.DOTALL)
#: Characters that would be read as markup if a ``<nowiki>`` body were not protected; they are
#: swapped for private-use code points until the end of cleaning (see ``unprotect``).
_MARKUP_CHARS = "[]{}|<>'&=*#:;!"
_PROTECT = {ord(c): 0xE000 + i for i, c in enumerate(_MARKUP_CHARS)}
_UNPROTECT = {v: k for k, v in _PROTECT.items()}
_PROTECTED_CHAR = re.compile(f"[{chr(0xE000)}-{chr(0xE000 + len(_MARKUP_CHARS) - 1)}]")

#: Extension and HTML elements whose *content* is not prose (citations, formulas, code,
#: galleries, generated or transclusion-only content): the whole element is dropped.
DROPPED_ELEMENTS = frozenset(
    {
        "ref", "references", "math", "chem", "ce", "gallery", "timeline", "imagemap",
        "score", "graph", "mapframe", "maplink", "templatedata", "templatestyles",
        "syntaxhighlight", "source", "pre", "hiero", "includeonly", "inputbox",
        "categorytree", "table", "indicator", "section", "charinsert", "rdf",
    }
)  # fmt: skip
_DROPPED_OPEN = re.compile(
    r"<(" + "|".join(sorted(DROPPED_ELEMENTS, key=len, reverse=True)) + r")\b([^<>]*)>",
    re.IGNORECASE,
)
_DROPPED_CLOSE = re.compile(
    r"</(" + "|".join(sorted(DROPPED_ELEMENTS, key=len, reverse=True)) + r")\s*>", re.IGNORECASE
)
_CLOSE_TAGS = {name: re.compile(rf"</{name}\s*>", re.IGNORECASE) for name in DROPPED_ELEMENTS}
_TABLE_OPEN = re.compile(r"<table\b", re.IGNORECASE)
_BRACE_RUN = re.compile(r"\{\{+|\}\}+")
#: Line-start patterns begin with "\n" rather than use re.MULTILINE "^": a literal first
#: character lets ``re`` skip ahead with a fast scan (about 10x faster on article text).
#: Functions using them scan ``"\n" + text`` so that the first line counts too.
_TABLE_EDGE = re.compile(r"\n[ \t:]*(?:\{\||\|\})")
_LINK_EDGE = re.compile(r"\[\[|\]\]")
HEADING_LINE = re.compile(r"\n(=+)[ \t]*([^\n]*?)[ \t]*\1[ \t]*(?=\n|\Z)")


def apply_spans(text: str, spans: list[Span]) -> str:
    """Replace non-overlapping ``(start, end, replacement)`` spans (any order) in one join."""
    if not spans:
        return text
    spans.sort()
    out: list[str] = []
    pos = 0
    for start, end, repl in spans:
        if start < pos:  # contained in a span already applied
            continue
        out.append(text[pos:start])
        out.append(repl)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def protect_nowiki(text: str) -> str:
    """Remove ``<nowiki>`` tags, keeping their literal body safe from later markup passes."""
    if _NOWIKI_WORD.search(text) is None:
        return text
    return _NOWIKI.sub(lambda m: (m.group(1) or "").translate(_PROTECT), text)


def drop_nowiki(text: str) -> str:
    """Delete ``<nowiki>`` elements with their body (for searches that must ignore them)."""
    if _NOWIKI_WORD.search(text) is None:
        return text
    return _NOWIKI.sub("", text)


def unprotect(text: str) -> str:
    """Restore the characters hidden by ``protect_nowiki``."""
    return text.translate(_UNPROTECT) if _PROTECTED_CHAR.search(text) else text


def drop_comments(text: str) -> str:
    """Delete ``<!-- ... -->`` (an unclosed comment runs to the end, as in MediaWiki)."""
    return _COMMENT.sub("", text) if "<!--" in text else text


def drop_elements(text: str, names: frozenset[str] = DROPPED_ELEMENTS) -> str:
    """Delete ``<name ...>...</name>`` and ``<name .../>`` for every element in ``names``
    (a subset of ``DROPPED_ELEMENTS``).

    An open tag without its closing tag loses only the tag itself (MediaWiki would show the
    rest as text); a closing tag without its opening tag is deleted. ``<table>`` may nest,
    the others may not, so only tables count depth.
    """
    if "<" not in text:
        return text
    spans: list[Span] = []
    pos = 0
    while True:
        m = _DROPPED_OPEN.search(text, pos)
        if m is None:
            break
        name = m.group(1).lower()
        if name not in names:
            pos = m.end()
            continue
        if m.group(2).rstrip().endswith("/"):
            spans.append((m.start(), m.end(), ""))
            pos = m.end()
            continue
        end = _find_close(text, name, m.end())
        if end < 0:
            spans.append((m.start(), m.end(), ""))
            pos = m.end()
        else:
            spans.append((m.start(), end, ""))
            pos = end
    text = apply_spans(text, spans)
    if "</" not in text:
        return text
    return _DROPPED_CLOSE.sub(lambda m: "" if m.group(1).lower() in names else m.group(), text)


def _find_close(text: str, name: str, pos: int) -> int:
    """End offset of the ``</name>`` closing the element opened before ``pos``, or -1.

    (Case-insensitive regexes, not ``text.lower()``: lower-casing can change string length,
    e.g. for "\u0130", and would shift every offset after it.)
    """
    close = _CLOSE_TAGS[name]
    m = close.search(text, pos)
    if name == "table":
        depth = 1
        while m is not None:
            depth += len(_TABLE_OPEN.findall(text, pos, m.start())) - 1
            if depth == 0:
                break
            pos = m.end()
            m = close.search(text, pos)
    return -1 if m is None else m.end()


def drop_templates(text: str) -> str:
    """Delete templates, parser functions and parameters: ``{{...}}`` and ``{{{...}}}``, nested.

    Brace runs are matched the way MediaWiki's preprocessor does: a closing run closes the
    innermost open run, three braces at a time when both sides have three (a parameter), two
    otherwise. A group whose closing braces never come is not a template: only its opening
    braces are deleted, and the complete templates inside it are deleted individually.
    """
    if "{{" not in text and "}}" not in text:
        return text
    spans: list[Span] = []
    # stack entries: [start, open braces left, run length, completed inner spans]
    stack: list[list] = []
    for m in _BRACE_RUN.finditer(text):
        run = m.group()
        if run[0] == "{":
            stack.append([m.start(), len(run), len(run), []])
            continue
        left = len(run)
        pos = m.start()
        while left >= 2 and stack:
            top = stack[-1]
            used = 3 if top[1] >= 3 and left >= 3 else 2
            top[1] -= used
            left -= used
            pos += used
            if top[1] < 2:
                stack.pop()
                (stack[-1][3] if stack else spans).append((top[0], pos, ""))
        if left and not stack:
            spans.append((pos, m.end(), ""))  # stray closing braces
    for start, _, run_length, inner in stack:
        spans.append((start, start + run_length, ""))
        spans.extend(inner)
    return apply_spans(text, spans)


def drop_tables(text: str) -> str:
    """Delete wiki tables ``{| ... |}`` (nested); an unclosed table runs to the end of text."""
    if "{|" not in text and "|}" not in text:
        return text
    text = "\n" + text
    spans: list[Span] = []
    starts: list[int] = []
    for m in _TABLE_EDGE.finditer(text):
        if m.group().endswith("{|"):
            starts.append(m.start() + 1)
        elif starts:
            start = starts.pop()
            if not starts:
                spans.append((start, m.end(), ""))
        else:
            spans.append((m.start() + 1, m.end(), ""))  # stray table end
    if starts:
        spans.append((starts[0], len(text), ""))
    return apply_spans(text, spans)[1:]


def drop_sections(text: str, titles: frozenset[str]) -> str:
    """Delete every section whose heading (lower case, formatting quotes stripped) is in
    ``titles``: from its heading to the next heading of the same or a higher level."""
    if "=" not in text:
        return text
    text = "\n" + text
    spans: list[Span] = []
    dropping_level = 0  # level of the section being dropped, 0 when none
    start = 0
    for m in HEADING_LINE.finditer(text):
        level = len(m.group(1))
        if dropping_level and level <= dropping_level:
            spans.append((start, m.start() + 1, ""))
            dropping_level = 0
        if not dropping_level and m.group(2).replace("''", "").strip().lower() in titles:
            dropping_level = level
            start = m.start() + 1
    if dropping_level:
        spans.append((start, len(text), ""))
    return apply_spans(text, spans)[1:]


def replace_links(text: str, render: Callable[[str], str]) -> str:
    """Replace every ``[[...]]`` with ``render(inner text)``, innermost links first.

    Links nest (a file caption holds links), so one pass keeps a stack of open links, each
    collecting its rendered content; closing a link renders it into its parent. Linear in the
    text, whatever the depth. A stray ``]]`` is deleted; an unclosed ``[[`` is deleted and its
    content kept (with the complete links inside it rendered).
    """
    if "[[" not in text and "]]" not in text:
        return text
    frames: list[list[str]] = [[]]
    pos = 0
    for m in _LINK_EDGE.finditer(text):
        frames[-1].append(text[pos : m.start()])
        pos = m.end()
        if m.group() == "[[":
            frames.append([])
        elif len(frames) > 1:
            inner = "".join(frames.pop())
            frames[-1].append(render(inner))
    frames[-1].append(text[pos:])
    while len(frames) > 1:
        inner = "".join(frames.pop())
        frames[-1].append(inner)
    return "".join(frames[0])
