"""The rules every id and name of a workspace follows, stated once and checked at the door.

An id that a later stage would refuse must never get in: the imports and the verbs that create
a thing check it here, naming the file and line (or the option) and the rule, and the later
stages use the same functions, so the rule and its checks cannot drift apart.

- **Passage ids** are what Lucene stores and what TREC run and qrels files carry, both split on
  whitespace: 1 to `ID_MAX_BYTES` bytes of UTF-8 without whitespace or control characters. In a
  JSON file a passage id is a string or an integer (DPR's `passage_id`, BEIR's `_id`); an
  object, a list, a boolean, a fraction or null is not an id.
- **Question ids** in a file (dpr-json `question_id`/`id`, nq-open `id`, BEIR's `_id`) are a
  JSON string or integer too. odqa stores a hash of the dataset, split and that id, so any text
  is accepted.
- **Names** (model ids, run names) become folder names (`models/<id>`), lock and staging file
  names, stage names and TREC run tags: 1 to `NAME_MAX_BYTES` bytes of UTF-8, no whitespace or
  control characters, no `/` or `\\`, not starting with `-` (it would read as an option) or `.`
  (hidden and temporary names).
"""

from __future__ import annotations

import hashlib
import unicodedata

ID_MAX_BYTES = 1024
NAME_MAX_BYTES = 128

PASSAGE_ID_RULE = (f"a passage id is 1 to {ID_MAX_BYTES:,} bytes of UTF-8 text (or a JSON integer) without "
                   "whitespace or control characters, as Lucene and TREC run files need")  # fmt: skip
QUESTION_ID_RULE = "a question id in a file is a JSON string or integer"
NAME_RULE = (f"model ids and run names are 1 to {NAME_MAX_BYTES} bytes of UTF-8 without whitespace, control "
             "characters, '/' or '\\', and do not start with '-' or '.'")  # fmt: skip


class IdRuleError(ValueError):
    """An id or name that breaks its rule; the message says where, what and the rule."""


def _control_or_space(text: str) -> str | None:
    """The first whitespace or control character of `text`, described, or None."""
    for char in text:
        if char.isspace() or unicodedata.category(char) == "Cc":
            return f"the character {char!r} (U+{ord(char):04X})"
    return None


def _json_scalar_id(value: object) -> str | None:
    """A JSON string or integer id as text; None for any other JSON value."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _shown(value: object) -> str:
    """`value` for a message: its repr, its start and end when long."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}…{text[-16:]}"


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "a list", bool: "a boolean", float: "a fraction", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _text_problem(text: str, max_bytes: int) -> str | None:
    """What every id and name must not be: empty, longer than `max_bytes`, or holding whitespace
    or a control character; None when `text` is none of these."""
    if not text:
        return "it is empty"
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return f"it is {size:,} bytes long"
    bad = _control_or_space(text)
    return f"it holds {bad}" if bad else None


def is_passage_id(passage_id: str) -> bool:
    """Whether `passage_id` follows the passage-id rule (the stages that skip older bad rows ask this)."""
    return isinstance(passage_id, str) and _text_problem(passage_id, ID_MAX_BYTES) is None


def check_passage_id(value: object, where: str) -> str:
    """`value` (a text field, or a decoded JSON value) as a passage id; `IdRuleError` naming
    `where` (the file and line or element), what is wrong and the rule when it is not one. The
    value itself is not quoted: a file's content never goes into a message or a log (a refused
    file may be anything, docs/boundaries.md)."""
    text = _json_scalar_id(value)
    if text is None:
        raise IdRuleError(f"{where}: the passage id is {_json_type(value)}; {PASSAGE_ID_RULE}")
    problem = _text_problem(text, ID_MAX_BYTES)
    if problem:
        raise IdRuleError(f"{where}: the passage id is refused: {problem}; {PASSAGE_ID_RULE}")
    return text


def check_question_id(value: object, where: str) -> str:
    """A question's own id in a file (a JSON string or integer) as text, else `IdRuleError`."""
    text = _json_scalar_id(value)
    if text is None:
        raise IdRuleError(f"{where}: the question id is {_json_type(value)}; {QUESTION_ID_RULE}")
    return text


def _name_problem(name: str) -> str | None:
    """What makes `name` break the rule of model ids and run names, or None."""
    problem = _text_problem(name, NAME_MAX_BYTES)
    if problem:
        return problem
    if "/" in name or "\\" in name:
        return "it holds a path separator"
    if name[0] in "-.":
        return f"it starts with {name[0]!r}"
    return None


def _check_name(name: str, what: str) -> str:
    problem = _name_problem(name)
    if problem:
        raise IdRuleError(f"{what} {_shown(name)} is refused: {problem}; {NAME_RULE}")
    return name


def check_model_id(model_id: str) -> str:
    """A new model id (`odqa train --model-id`, QSFT, recipes), else `IdRuleError` with the rule."""
    return _check_name(model_id, "model id")


def check_run_name(run: str) -> str:
    """A run name (`odqa retrieve --run`, `odqa import run --run`), else `IdRuleError` with the rule."""
    return _check_name(run, "run name")


def derived_name(text: str, empty: str) -> str:
    """A name odqa makes from others (an experiment's model ids, a recipe's run names) that follows
    the name rule: file-safe, and when longer than the limit, cut with a hash of the whole, so the
    same inputs always give the same name."""
    from .atomic import slug  # (pyarrow with it: the command line reads this module's rules at start)

    name = slug(text, empty).lstrip("-.") or empty
    if len(name) > NAME_MAX_BYTES:
        name = f"{name[:NAME_MAX_BYTES - 17]}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    return name
