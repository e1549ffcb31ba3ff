"""Answer lists read as Python literals while another thread parses (CPython 3.11's shared AST
depth counter, python/cpython#106905): the stdlib call fails under the same conditions, odqa's
never does and gives the same values and errors."""

from __future__ import annotations

import ast
import contextlib
import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odqa.pipelines.questions.python_literals import literal_eval

LITERAL = "[" + ", ".join(f'"answer {i}"' for i in range(300)) + "]"


class _YieldingFinalizer:
    """Garbage whose finalizer lets the GIL go, as a socket's or a generator's can."""

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        time.sleep(0)


@contextlib.contextmanager
def another_thread_parsing() -> Iterator[None]:
    """A thread parsing ASTs 30 frames deeper than the caller, and collections that run often."""
    stop = threading.Event()

    def parse_deeper(depth: int) -> None:
        if depth:
            return parse_deeper(depth - 1)
        while not stop.is_set():
            # this thread is sometimes the one interrupted: its own failures are not the subject
            with contextlib.suppress(SystemError):
                ast.parse("[1, [2, [3, [4]]]]")

    thresholds, interval = gc.get_threshold(), sys.getswitchinterval()
    gc.set_threshold(10, 1, 1)
    sys.setswitchinterval(1e-5)
    thread = threading.Thread(target=parse_deeper, args=(30,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        gc.set_threshold(*thresholds)
        sys.setswitchinterval(interval)


def failures(parse: Callable[[str], Any], calls: int) -> int:
    failed = 0
    for _ in range(calls):
        garbage = [_YieldingFinalizer() for _ in range(20)]
        del garbage
        try:
            assert parse(LITERAL)[299] == "answer 299"
        except SystemError:
            failed += 1
    return failed


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the shared counter is CPython 3.11's")
def test_the_stdlib_fails_while_another_thread_parses_and_odqa_does_not() -> None:
    with another_thread_parsing():
        assert failures(ast.literal_eval, 100) > 0
        assert failures(literal_eval, 300) == 0


@pytest.mark.parametrize("text", ["['a', \"b's\"]", '  ["x"]', "('t',)", "[1, -2, 3+4j]", "{'k': [None]}"])
def test_the_same_values_as_the_stdlib(text: str) -> None:
    assert literal_eval(text) == ast.literal_eval(text)


@pytest.mark.parametrize("text", ["[f(1)]", "['a'", "x", "\t['a']\n1"])
def test_the_same_errors_as_the_stdlib(text: str) -> None:
    with pytest.raises(Exception) as stdlib:
        ast.literal_eval(text)
    with pytest.raises(type(stdlib.value)):
        literal_eval(text)


def test_the_collector_is_left_as_found() -> None:
    gc.disable()
    try:
        literal_eval("[1]")
        assert not gc.isenabled()
    finally:
        gc.enable()
    literal_eval("[1]")
    assert gc.isenabled()
