"""The wikitext cleaner and category extraction on hand-made markup, one construct at a time."""

from __future__ import annotations

import pytest

from odqa.pipelines.wikipedia.wikitext_cleaner import (
    clean_wikitext,
    extract_categories,
    is_disambiguation,
    normalize_title,
)

REMNANTS = ("{{", "}}", "[[", "]]", "<ref", "thumb|", "Category:", "&nbsp;", "<", "|")


def clean(text: str, **kwargs) -> str:
    out = clean_wikitext(text, **kwargs)
    assert out == " ".join(out.split()), "output is whitespace-normalized"
    return out


@pytest.mark.parametrize(
    ("wikitext", "expected"),
    [
        # templates, nested, multi-line infoboxes, parser functions, parameters
        ("A {{convert|5|km}} B", "A B"),
        (
            "{{Infobox person\n| name = X\n| birth = {{birth date|1900|1|1}}\n| image = a.jpg\n}}\nX was born.",
            "X was born.",
        ),
        ("A{{#if:{{{1|}}}|yes|no}}B", "AB"),
        ("A {{{param|default}}} B", "A B"),
        ("A {{outer|{{inner|{{deep}}}}}} B", "A B"),
        # unbalanced braces lose the braces, never the prose
        ("A {{broken and B", "A broken and B"),
        ("A }} B", "A B"),
        ("A {{x}}} B", "A B"),
        # tables, nested, and rows of a table a template opened
        ("A\n{| class=wikitable\n|-\n| 1 || 2\n|}\nB", "A B"),
        ("A\n{|\n|\n{|\n| inner\n|}\n| outer\n|}\nB", "A B"),
        ("{{Table start}}\n|-\n| a || b\n! header\n|}\nB", "B"),
        ("A\n{|\n| never closed", "A"),
        # references and reference sections
        ('A<ref name="x">{{cite web|url=http://a}}</ref> B<ref name=y/> C<ref name="z" /> D', "A B C D"),
        ("A<ref>x</ref><ref group=n>y</ref> B", "A B"),
        ("A <REF>x</REF> B", "A B"),
        ("A\n== Notes ==\n<references />\n== References ==\n* {{cite book}}\n== Later ==\nC", "A C"),
        ("A\n== See also ==\n* [[B]]\n=== Sub of see also ===\nx\n== History ==\nH", "A H"),
        ("A\n== External links ==\n* [http://x.org X]", "A"),
        # files, images and galleries (captions with links inside)
        ("A [[File:X.jpg|thumb|left|A caption with [[link]] and [[a|b]].]] B", "A B"),
        ("A [[Image:X.png|200px]] B [[file:y.jpg]] C", "A B C"),
        ("A\n<gallery mode=packed>\nFile:a.jpg|cap [[x]]\n</gallery>\nB", "A B"),
        # categories and interlanguage links are not prose; visible interwiki links are
        ("A [[Category:Foo|sort]] [[category:Bar]] B", "A B"),
        ("See [[:Category:Foo]] and [[:Category:Bar|the bar category]].", "See Foo and the bar category."),
        ("A [[de:Anarchismus]] [[simple:Anarchism]] [[zh-min-nan:X]] B", "A B"),
        ("A [[wikt:anarchy|anarchy]] [[s:Text|source]] B", "A anarchy source B"),
        # comments
        ("A <!-- hidden [[link]] {{tpl}} --> B", "A B"),
        ("A <!-- never closed [[x]]", "A"),
        # HTML and extension tags: formatting keeps its text, the rest is dropped
        (
            "<b>bold</b> <i>it</i> <span style='x'>span</span> H<sub>2</sub>O x<sup>2</sup> <small>s</small>",
            "bold it span H2O x2 s",
        ),
        ("A <math>\\frac{a}{b}}}</math> B <chem>H2O</chem> C", "A B C"),
        ("A\n<timeline>\nImageSize = width:100\n</timeline>\nB <score>{c d}</score>", "A B"),
        ("one<br>two<br/>three<br />four", "one two three four"),
        ("A <div class='x'>in div</div> B <blockquote>quote</blockquote>", "A in div B quote"),
        ("A <pre>code {{x}}</pre> <syntaxhighlight lang=c>int x;</syntaxhighlight> B", "A B"),
        ("A <includeonly>only when transcluded</includeonly><noinclude>shown</noinclude> B", "A shown B"),
        # unbalanced tags are dropped, text that only looks like a tag is kept
        ("a </div> b <div>c</span>d </ref> e <REF name=x> f", "a b c d e f"),
        ("a < b > c <http://x.org>", "a < b > c <http://x.org>"),
        ("<NoWiki>[[x]] <b></NOWIKI>", "[[x]] <b>"),
        # magic words, bold/italic quotes
        ("__NOTOC__A __TOC__ B", "A B"),
        ("'''Bold''' and ''italic'' and '''''both'''''", "Bold and italic and both"),
        # links keep their text
        (
            "[[Political philosophy]] and [[Anarchy|anarchic]] [[apple]]s",
            "Political philosophy and anarchic apples",
        ),
        ("[[Anarchism#History|history]] [[#Section]]", "history #Section"),
        ("[[a|b [[c]] d]]", "b c d"),
        ("A [[unclosed link B", "A unclosed link B"),
        ("A ]] B", "A B"),
        # external links: label kept, bare bracketed URL dropped, free URL kept
        (
            "See [http://example.org the site] and [http://example.org] or http://x.org/a",
            "See the site and or http://x.org/a",
        ),
        # HTML entities, inside and outside markup
        ("A&nbsp;B &amp; C &ndash; D &#8212; E &#x41; &amp;nbsp;F", "A B & C – D — E A F"),
        # headings dropped (DPR), lists kept by default
        ("== History ==\nText.\n=== Early ===\nMore.", "Text. More."),
        (
            "Intro\n* one\n** two\n# three\n; term : def\n: indented",
            "Intro one two three term : def indented",
        ),
        ("A\n----\nB", "A B"),
        # nowiki bodies are literal text
        ("A <nowiki>''not italic'' [x]</nowiki> B <nowiki/>C", "A ''not italic'' [x] B C"),
        # empty parentheses left by removed templates
        ("Anarchism ({{IPA|x}}; {{lang|grc|y}}) is", "Anarchism is"),
        ("born ( {{birth date}} 1900 ) in", "born (1900) in"),
        # case-changing characters before markup must not shift offsets
        ("\u0130stanbul<ref>x</ref> is big.<ref>y</ref> Yes.", "\u0130stanbul is big. Yes."),
    ],
)
def test_clean_wikitext(wikitext: str, expected: str) -> None:
    assert clean(wikitext) == expected


def test_deeply_nested_links_are_linear() -> None:
    depth = 20_000
    assert clean("x " + "[[a|" * depth + "b" + "]]" * depth + " y") == "x b y"
    assert clean("x " + "[[File:a.jpg|" * depth + "b" + "]]" * depth + " y") == "x y"
    assert clean("x " + "{{a|" * depth + "b" + "}}" * depth + " y") == "x y"


def test_lists_can_be_dropped_indentation_stays() -> None:
    text = "Intro.\n* one\n** two\n# three\n; term\n: indented\nOutro."
    assert clean(text, keep_lists=False) == "Intro. indented Outro."
    assert clean(text) == "Intro. one two three term indented Outro."


def test_headings_can_be_kept() -> None:
    assert clean("Intro.\n== '''History''' ==\nText.", keep_headings=True) == "Intro. History Text."


def test_reference_sections_can_be_kept() -> None:
    text = "A\n== See also ==\n* [[B]]"
    assert clean(text, drop_sections=frozenset()) == "A B"


def test_realistic_article_leaves_no_remnants() -> None:
    text = """{{Use dmy dates|date=May 2016}}
{{Infobox settlement
| name = Baku
| image_skyline = Baku skyline.jpg
| population_total = 2,150,800<ref name="pop">{{cite web|title=Population}}</ref>
}}
'''Baku''' ({{lang-az|Bakı}}) is the [[capital city|capital]] of [[Azerbaijan]].<ref>{{cite book|title=X}}</ref>
[[File:Baku at night.jpg|thumb|upright=1.2|Baku at night, seen from the [[Caspian Sea|sea]].]]
<!-- TODO: expand -->
== History ==
The city had 2&nbsp;million people{{citation needed|date=2015}}.
{| class="wikitable"
! Year !! Population
|-
| 2000 || 1.8 M
|}
* Old City
* [[Maiden Tower (Baku)|Maiden Tower]]
== References ==
{{reflist}}
[[Category:Baku| ]]
[[Category:Capitals in Asia]]
[[az:Bakı]]
[[ru:Баку]]
"""
    out = clean(text)
    assert out == ("Baku is the capital of Azerbaijan. The city had 2 million people. Old City Maiden Tower")
    for remnant in REMNANTS:
        assert remnant not in out


def test_extract_categories() -> None:
    text = """A [[Category:Political_philosophy|sort key]]
[[ category : anarchism ]] [[Category:Anarchism]] [[:Category:Not a member]]
<!-- [[Category:Commented out]] --> <nowiki>[[Category:Literal]]</nowiki>
<includeonly>[[Category:Only when transcluded]]</includeonly>
<noinclude>[[Category:Shown on the page]]</noinclude>
[[Category:Tom &amp; Jerry]] [[CATEGORY:Upper]] [[Category:]]"""
    assert extract_categories(text) == [
        "Political philosophy",
        "Anarchism",
        "Shown on the page",
        "Tom & Jerry",
        "Upper",
    ]
    assert extract_categories("No categories here.") == []


def test_normalize_title() -> None:
    assert normalize_title("  foo__bar  baz ") == "Foo bar baz"
    assert normalize_title("ébène") == "Ébène"
    assert normalize_title("ß-x") == "ß-x"  # upper-casing would change the length: kept as is


def test_is_disambiguation() -> None:
    assert is_disambiguation("'''Alpha''' may refer to:\n* A\n{{disambiguation}}")
    assert is_disambiguation("x {{Disambig|geo}}")
    assert is_disambiguation("x {{hndis|Smith, John}}")
    assert is_disambiguation("x {{Place name disambiguation}}")
    assert not is_disambiguation("x {{Infobox person}} about disambiguation pages")
