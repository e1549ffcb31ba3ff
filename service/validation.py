"""Checks of the text a request brings in, shared by every route of the service.

JSON can carry strings no tokenizer, Lucene query parser or log line should see: lone UTF-16
surrogates (``"\\ud800"`` is valid JSON but not encodable as UTF-8: the question encoder raised on
it and failed the whole micro-batch it shared with other requests), NUL and other control
characters, and texts long enough to make one request cost as much as thousands. They are refused
at the edge, naming the field and the position, so nothing past it has to cope with them.

`checked_text` is the one check: request models call it from their validators (its ValueError
becomes the 422 `{"error": ...}` every refusal of the service has), and so can any other route.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

MAX_QUESTION_CHARS = 2_000
# C0 controls except tab, newline and carriage return; DEL and the C1 controls; UTF-16 surrogates
# (a lone one reaches Python from JSON's \uXXXX escapes; a valid pair is decoded into one character).
_REFUSED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def checked_text(value: str, where: str, *, limit: int = MAX_QUESTION_CHARS) -> str:
    """``value`` unchanged when it is a non-blank string of at most ``limit`` characters without
    control characters or lone surrogates; else ValueError naming ``where`` and what is wrong."""
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{where} is empty")
    if len(value) > limit:
        raise ValueError(f"{where} has {len(value):,} characters; the limit is {limit:,}")
    bad = _REFUSED.search(value)
    if bad is not None:
        kind = "a lone UTF-16 surrogate" if "\ud800" <= bad.group() <= "\udfff" else "a control character"
        raise ValueError(f"{where} has {kind} (U+{ord(bad.group()):04X}) at character {bad.start()}; "
                         "send plain text")  # fmt: skip
    return value


def checked_percent_encoding(raw: bytes, where: str) -> None:
    """ValueError unless the percent-encoded ``raw`` (a URL's query string or path, as sent)
    decodes to UTF-8, naming ``where`` and the first byte that does not.

    Starlette and uvicorn decode query strings and paths with ``errors="replace"``: before,
    ``/v1/bm25/search?query=Curie%E9`` (Latin-1) searched for ``Curie\ufffd`` and answered 200 for a
    question nobody asked; ``POST /search`` refuses a body that is not UTF-8 (400) the same way."""
    decoded = unquote_to_bytes(raw.replace(b"+", b" "))
    try:
        decoded.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{where} is not UTF-8 once percent-decoded (byte {error.start}: "
                         f"{decoded[error.start:error.start + 1]!r}); percent-encode the UTF-8 bytes of the text") from None  # fmt: skip
