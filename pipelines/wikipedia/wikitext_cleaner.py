"""Wikitext -> plain prose the way DPR prepared Wikipedia, plus category extraction.

DPR (Karpukhin et al., 2020, sec. 4.1) used DrQA's preprocessing (WikiExtractor) "to extract
the clean, text-portion of articles", which "removes semi-structured data, such as tables,
infoboxes, lists, as well as the disambiguation pages". So templates/infoboxes, tables,
references, files, categories, interlanguage links, comments and HTML tags are dropped and
link text is kept. Section headings are dropped too: they are titles, not sentences, and would
split a passage's prose with stray words (``keep_headings`` keeps them for experiments). Lists
are configurable (``keep_lists``, kept by default as the project asks); since DPR lost the
reference lists with the other lists, sections such as "References" or "External links" are
dropped by their heading (``drop_sections``).

How: ``markup_scanner`` deletes the bulky non-prose regions and renders internal links with
linear scanners, then mwparserfromhell parses the (much smaller) remainder and a small walk
over its nodes renders HTML/extension tags, external links, entities and headings. The result
is whitespace-normalized: one line, single spaces, so that DPR-style passages (blocks of N
words) joined with spaces give back exactly the cleaned text.
"""

from __future__ import annotations

import html
import re

import mwparserfromhell
from mwparserfromhell.nodes import ExternalLink, Heading, HTMLEntity, Tag, Text
from mwparserfromhell.wikicode import Wikicode

from . import markup_scanner as scan

#: Namespace names (lower case) of ``[[File:...]]`` links, which embed media and are dropped.
FILE_NAMESPACES = frozenset({"file", "image"})
CATEGORY_NAMESPACE = "category"

#: Interlanguage links are ``[[xx:Title]]`` with a lower-case language code as the prefix.
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*\Z")
_LANGUAGE_EXTRA = frozenset({"simple"})
#: Lower-case 2-3 letter interwiki prefixes that render as ordinary visible links.
_VISIBLE_INTERWIKI = frozenset({"wp", "mw", "doi", "rfc", "iso", "arxiv", "oeis", "imdb"})

#: Sections that hold sources and pointers rather than prose (mostly lists of citations).
REFERENCE_SECTIONS = frozenset(
    {"references", "notes", "footnotes", "citations", "sources", "bibliography",
     "further reading", "external links", "see also", "notes and references",
     "references and notes", "works cited", "general references", "explanatory notes",
     "sources and further reading", "reference", "note", "source"}
)  # fmt: skip
_LIST_MARKER = re.compile(r"\n[*#:;]+[ \t]*")
_LIST_LINE = re.compile(r"\n[*#;][^\n]*")
_INDENT_MARKER = re.compile(r"\n:+[ \t]*")
#: Table rows left behind when a table was opened or closed by a (deleted) template, and
#: horizontal rules; prose lines never start with ``|`` or ``!``.
_TABLE_ROW_OR_RULE = re.compile(r"\n(?:[ \t]*[|!][^\n]*|-{4,}[ \t]*)(?=\n|\Z)")
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_ENTITY = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});")
_EMPTY_PARENS = re.compile(r"\(\s*(?:[,;:.\u2013\u2014-]\s*)*\)")
_SPACE_AFTER_OPEN = re.compile(r"\(\s+")
_SPACE_BEFORE_CLOSE = re.compile(r" +(?=[),;]|\.(?:\s|$))")

#: Unbalanced tags of the HTML elements MediaWiki allows, which the parser leaves as text.
_HTML_TAG = re.compile(
    r"</?(?:abbr|b|bdi|bdo|big|blockquote|br|caption|center|cite|code|data|dd|del|dfn|div|dl|dt"
    r"|em|font|h[1-6]|hr|i|ins|kbd|li|mark|ol|p|q|rb|rp|rt|rtc|ruby|s|samp|small|span|strike"
    r"|strong|sub|sup|td|th|time|tr|tt|u|ul|var|wbr|onlyinclude|noinclude|poem)\b[^<>]*>",
    re.IGNORECASE,
)
#: Tags that break a line when rendered (so words on both sides never merge).
_BLOCK_TAGS = frozenset(
    {"br", "hr", "p", "div", "li", "ul", "ol", "dl", "dt", "dd", "tr", "td", "th",
     "blockquote", "center", "poem", "caption", "h1", "h2", "h3", "h4", "h5", "h6"}
)  # fmt: skip

_DISAMBIGUATION = re.compile(
    r"\{\{\s*(?:disambig(?:uation)?|dab|disamb|hndis|geodis|numberdis|mathdab"
    r"|[\w ]+ disambiguation)\s*(?:\||\}\})",
    re.IGNORECASE,
)
_CATEGORY_WORD = re.compile(r"\[\[[ \t]*category", re.IGNORECASE)
_CATEGORY_LINK = re.compile(r"\[\[[ \t]*category[ \t]*:([^\[\]|]*)(?:\|[^\[\]]*)?\]\]", re.IGNORECASE)
#: Elements whose body is never rendered as page wikitext, so their category links don't count.
_NON_WIKITEXT = frozenset({"includeonly", "pre", "math", "syntaxhighlight", "source", "chem", "ce"})


def clean_wikitext(
    text: str,
    *,
    keep_lists: bool = True,
    keep_headings: bool = False,
    drop_sections: frozenset[str] = REFERENCE_SECTIONS,
) -> str:
    """Return the prose of an article's wikitext as one whitespace-normalized line.

    ``drop_sections``: lower-case headings whose whole section is dropped (reference lists,
    external links, see also ...); pass ``frozenset()`` to keep every section.
    """
    text = scan.protect_nowiki(text)
    text = scan.drop_comments(text)
    text = scan.drop_elements(text)
    text = scan.drop_templates(text)
    text = scan.drop_tables(text)
    if drop_sections:
        text = scan.drop_sections(text, drop_sections)
    text = scan.replace_links(text, _render_link)
    # Line passes: "\n"-anchored patterns (see markup_scanner), so the first line gets one too.
    text = "\n" + text
    if not keep_headings:
        text = scan.HEADING_LINE.sub("\n", text)
    if keep_lists:
        text = _LIST_MARKER.sub("\n", text)
    else:
        text = _INDENT_MARKER.sub("\n", _LIST_LINE.sub("\n", text))
    text = _TABLE_ROW_OR_RULE.sub("\n", text)
    if "__" in text:
        text = _MAGIC_WORD.sub("", text)
    out: list[str] = []
    _render(mwparserfromhell.parse(text, skip_style_tags=True), out)
    text = "".join(out)
    if "<" in text:
        text = _HTML_TAG.sub(" ", text)
    if "''" in text:  # bold ''' and italic ''; of 4 quotes, the first is a literal apostrophe
        text = text.replace("'''", "").replace("''", "")
    if "&" in text:
        text = _ENTITY.sub(lambda m: html.unescape(m.group()), text)
    text = scan.unprotect(text)
    if "(" in text:
        text = _SPACE_AFTER_OPEN.sub("(", _EMPTY_PARENS.sub("", text))
    return _SPACE_BEFORE_CLOSE.sub("", " ".join(text.split()))


def _render_link(inner: str) -> str:
    """Visible text of ``[[inner]]`` (links inside it are already rendered): the label, else
    the target; '' for links that are not inline text (files, categories, interlanguage)."""
    target, bar, label = inner.partition("|")
    target = target.strip()
    colon = target.startswith(":")
    if colon:
        target = target[1:].lstrip()
    prefix, sep, rest = target.partition(":")
    if sep:
        ns = prefix.strip().lower()
        if not colon:
            if ns in FILE_NAMESPACES or ns == CATEGORY_NAMESPACE:
                return ""
            if (
                prefix == ns
                and ns not in _VISIBLE_INTERWIKI
                and (_LANGUAGE_CODE.match(ns) or ns in _LANGUAGE_EXTRA)
            ):
                return ""  # interlanguage link: shown in the sidebar, not in the text
        elif not bar and (ns in FILE_NAMESPACES or ns == CATEGORY_NAMESPACE):
            return rest.strip()  # [[:Category:X]] shows "Category:X"; keep only the name
    return label if bar and label.strip() else target


def _render(code: Wikicode, out: list[str]) -> None:
    """Append the visible text of parsed wikitext to ``out``."""
    for node in code.nodes:
        kind = type(node)
        if kind is Text:
            out.append(node.value)
        elif kind is Tag:
            if node.wiki_markup:
                continue  # list/rule markup the line passes did not catch
            name = str(node.tag).strip().lower()
            if name in scan.DROPPED_ELEMENTS:
                continue
            block = name in _BLOCK_TAGS
            if block:
                out.append("\n")
            if node.contents is not None and not node.self_closing:
                _render(node.contents, out)
            if block:
                out.append("\n")
        elif kind is HTMLEntity:
            out.append(node.normalize())
        elif kind is ExternalLink:
            if not node.brackets:
                out.append(str(node.url))
            elif node.title is not None:
                _render(node.title, out)
        elif kind is Heading:
            out.append("\n")
            _render(node.title, out)
            out.append("\n")
        # Wikilink, Template, Argument, Comment: the scanner passes removed them before parsing.


def is_disambiguation(text: str) -> bool:
    """True for disambiguation pages (DPR dropped them), recognized by their template."""
    return "{{" in text and _DISAMBIGUATION.search(text) is not None


def normalize_title(name: str) -> str:
    """MediaWiki title normalization: entities decoded, ``_`` -> space, spaces collapsed,
    first letter upper-cased (first-letter case sensitivity, as on English Wikipedia)."""
    if "&" in name:
        name = html.unescape(name)
    name = " ".join(name.replace("_", " ").split())
    first = name[:1].upper()
    return first + name[1:] if len(first) == 1 else name


def extract_categories(text: str) -> list[str]:
    """The page's own ``[[Category:X|sort key]]`` targets, normalized, in order, deduplicated.

    Counted: every category link outside comments and outside elements whose body is not
    rendered on the page itself (``<nowiki>``, ``<includeonly>``, ``<pre>``, ``<math>``,
    source code). ``<noinclude>`` bodies are rendered on the page, so they count.
    ``[[:Category:X]]`` (leading colon) is a visible link, not a categorization. Categories
    that templates add when expanded cannot be known without the templates, so they are not
    found here.
    """
    if _CATEGORY_WORD.search(text) is None:
        return []
    text = scan.drop_comments(text)
    text = scan.drop_nowiki(text)
    text = scan.drop_elements(text, _NON_WIKITEXT)
    seen: dict[str, None] = {}
    for m in _CATEGORY_LINK.finditer(text):
        name = normalize_title(m.group(1))
        if name:
            seen.setdefault(name, None)
    return list(seen)
