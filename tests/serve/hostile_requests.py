"""Hostile request bodies for `odqa serve`'s edge (issue 28), each with the message its refusal
carries: the service refuses every one with a 422 and its error shape, ``{"error": ...}``. Sent
alone over an empty workspace (tests/boundaries/test_service_edge.py) and among valid requests
over a real release (tests/serve/test_edge.py)."""

from __future__ import annotations

# JSON texts as sent on the wire (\\u escapes stay escapes: a lone surrogate is valid JSON).
REFUSED = [
    ('{"question": "\\ud800 amazon"}', "lone UTF-16 surrogate (U+D800) at character 0"),
    ('{"question": "amazon \\udfff"}', "lone UTF-16 surrogate (U+DFFF) at character 7"),
    ('{"questions": ["Where was Marie Curie born?", "x\\ud83d"]}', "questions[1] has a lone UTF-16 surrogate"),
    ('{"question": "who\\u0000 is"}', "control character (U+0000) at character 3"),
    ('{"question": "\\u001b[31mred"}', "control character (U+001B)"),
    ('{"question": "x", "k": "5"}', "k: Input should be a valid integer"),
    ('{"question": "x", "k": true}', "k: Input should be a valid integer"),
    ('{"question": "x", "k": 5.0}', "k: Input should be a valid integer"),
    ('{"question": "x", "alpha": true}', "alpha: Input should be a valid number"),
    ('{"question": "x", "alpha": "0.5"}', "alpha: Input should be a valid number"),
    ('{"question": 5}', "question: Input should be a valid string"),
    ('{"questions": ["a", 7]}', "questions.1: Input should be a valid string"),
    ('{"question": "x", "retriever": ["bm25"]}', "retriever: Input should be a valid string"),
    ('{"question": "x", "model": "m\\u0007"}', "control character (U+0007)"),
]
