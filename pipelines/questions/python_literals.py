"""`ast.literal_eval` that another thread's use of the `ast` module cannot break.

In CPython 3.11 the counter that `ast.parse` keeps while it turns the parser's tree into Python
objects lives in the interpreter's `ast` module state, not in the thread (python/cpython#106905).
If the thread is switched out halfway (a garbage collection inside the conversion runs a
finalizer, and Python code lets the GIL go) and another thread parses meanwhile (3.11's
`traceback` parses a source line to place its carets, so any thread that formats an exception
does), the check at the end sees the other thread's depth and raises `SystemError: AST
constructor recursion depth mismatch` for a valid literal. A CI test worker hit it.

The conversion is C code that runs no Python code of its own, so with the collector paused for
that call it holds the GIL from start to end and no other thread can touch the counter.
"""

from __future__ import annotations

import ast
import gc
from typing import Any


def literal_eval(text: str) -> Any:
    """`ast.literal_eval(text)`: the same values and errors, parsed without a thread switch."""
    return ast.literal_eval(_parse_uninterrupted(text.lstrip(" \t")))


def _parse_uninterrupted(source: str) -> ast.Expression:
    collecting = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, mode="eval")
    finally:
        if collecting:
            gc.enable()
