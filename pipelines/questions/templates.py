"""Relation query templates in EntityQuestions' `relation_query_templates.json` format.

The file maps a Wikidata property (optionally with a suffix such as `P19_similar`, a paraphrase
EntityQuestions ships for a few relations) to a question with one `[X]` slot for the subject:
`{"P19": "Where was [X] born?"}`. A question is the template with `[X]` replaced by the subject
label, verbatim: no casing, spacing or punctuation changes, which is what lets our generator
reproduce the published EntityQuestions questions byte for byte.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

SLOT = "[X]"
TEMPLATE_KEY = re.compile(r"^P\d+(?:_[A-Za-z0-9]+)?$")


class TemplateError(ValueError):
    """A templates file or template that cannot be used, naming the file and key."""


def load_templates(path: Path) -> dict[str, str]:
    """Read and validate a templates file: keys like P19 / P19_similar, exactly one [X] each."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TemplateError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise TemplateError(f"{path}: expected a JSON object mapping relation ids to templates")
    for key, template in data.items():
        if not TEMPLATE_KEY.match(key):
            raise TemplateError(f"{path}: key {key!r} is not a relation id like 'P19' or 'P19_similar'")
        if not isinstance(template, str) or template.count(SLOT) != 1:
            raise TemplateError(f"{path}: template of {key} must be a string with exactly one {SLOT}, got {template!r}")
    return dict(data)


def base_relation(key: str) -> str:
    """The Wikidata property a template key belongs to ("P19_similar" -> "P19")."""
    return key.split("_", 1)[0]


def make_question(template: str, subject: str) -> str:
    """The template with its [X] slot replaced by the subject label, nothing else changed."""
    if template.count(SLOT) != 1:
        raise TemplateError(f"template must contain exactly one {SLOT}: {template!r}")
    return template.replace(SLOT, subject)


def subject_pattern(template: str) -> re.Pattern[str]:
    """A regex matching the template's questions, capturing the subject: the inverse of make_question."""
    if template.count(SLOT) != 1:
        raise TemplateError(f"template must contain exactly one {SLOT}: {template!r}")
    before, after = template.split(SLOT)
    return re.compile(re.escape(before) + "(.+)" + re.escape(after), flags=re.DOTALL)


def recover_subject(template: str, question: str) -> str | None:
    """The subject label a question was generated from with `template`, or None if it was not."""
    match = subject_pattern(template).fullmatch(question)
    return match.group(1) if match else None
