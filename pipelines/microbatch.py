"""Micro-batching: many concurrent callers, one batched call.

A question encoder (and a FAISS or Lucene search) costs much less per question in a batch of 32
than 32 times alone, so a service answering concurrent requests should batch them. A
:class:`MicroBatcher` owns one worker thread; callers :meth:`~MicroBatcher.submit` their items
and get a future. The worker takes the first waiting submission, then keeps collecting more for
at most ``max_wait_s`` (bounded: e.g. 5 ms) or until ``max_items``, and hands them all to the
batch function in one call.

Waiting is only worth it when more work is about to arrive. The optional ``expected`` hint says
how many callers are on their way (a service counts requests that have arrived but not yet
submitted), and a previous batch of several submissions says callers are concurrent (they come
back one by one after their answers). Without either, the worker runs the batch at once: a lone
caller pays no waiting at all, while concurrent ones still share batches.

With one worker (the default) the batch function is also serialised: code that is not
thread-safe (a JVM searcher) is only ever called from that thread. ``workers`` > 1 runs that many
batches at once (each worker collects its own), for a batch function that may run concurrently
and a host with cores to spare.

A serialised worker is also a queue every caller waits in: one submission of 256 long questions
at a large k held a BM25 worker for 6 s, and a one-question search sent meanwhile waited all of
it. With ``slice_items``, a larger submission is run a slice at a time, and its next slice is
queued only once the one before is answered, behind whatever arrived meanwhile: a caller waits
for at most one slice of another's work, and the large one still gets its answer whole.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("odqa.microbatch")

_POLL_S = 0.0005  # how often the worker re-reads the `expected` hint while collecting


class BatcherClosedError(RuntimeError):
    """The batcher was closed; no more submissions are taken."""


@dataclass
class _Submission(Generic[T, R]):
    """One slice of a caller's items (all of them without slicing); `rest` waits for its turn and
    `done` holds the results of the slices before, so the caller's future gets them whole."""

    items: Sequence[T]
    future: Future = field(default_factory=Future)
    rest: Sequence[T] = ()
    done: list[R] = field(default_factory=list)


@dataclass
class BatchStats:
    """Running totals, for /health and the benchmark: how much batching actually happened."""

    batches: int = 0
    items: int = 0
    submissions: int = 0
    largest: int = 0

    def as_dict(self) -> dict[str, float]:
        return {"batches": self.batches, "items": self.items, "submissions": self.submissions,
                "largest_batch": self.largest,
                "mean_batch": round(self.items / self.batches, 2) if self.batches else 0.0}  # fmt: skip


class MicroBatcher(Generic[T, R]):
    """Collects concurrent submissions for up to ``max_wait_s`` and runs them as one batch.

    ``fn`` maps a list of items to a list of results of the same length, in order; each
    submitter gets the slice for its own items. If ``fn`` raises, each submission of that batch is
    run alone, and only those that fail alone get the exception (the worker keeps running).
    """

    def __init__(
        self,
        fn: Callable[[list[T]], list[R]],
        *,
        max_wait_s: float = 0.005,
        max_items: int = 256,
        expected: Callable[[], int] | None = None,
        name: str = "microbatch",
        workers: int = 1,
        slice_items: int | None = None,
    ) -> None:
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s}")
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if slice_items is not None and slice_items < 1:
            raise ValueError(f"slice_items must be >= 1 (or None), got {slice_items}")
        self.fn = fn
        self.max_wait_s = max_wait_s
        self.max_items = max_items
        self.expected = expected
        self.name = name
        self.slice_items = slice_items
        self.stats = BatchStats()
        # queue.Queue, not SimpleQueue: with several consumers, CPython 3.11's SimpleQueue.get(timeout=...)
        # was measured sleeping past its timeout until the *next* put, so a worker holding a collected
        # batch waited for a later request; a retiring release gets none, and its requests hung
        # (tests/serve/test_microbatch.py reproduces it).
        self._queue: queue.Queue[_Submission[T, R] | None] = queue.Queue()
        self._closed = False
        self._last_submissions = 0  # submissions in the previous batch: evidence of concurrent callers
        self._lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{n}", daemon=True) for n in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, items: Sequence[T]) -> Future:
        """Queue ``items``; the future resolves to their results (a list, same order)."""
        items = list(items)
        cut = len(items) if self.slice_items is None else self.slice_items
        submission: _Submission[T, R] = _Submission(items[:cut], rest=items[cut:])
        with self._lock:
            if self._closed:
                raise BatcherClosedError(f"{self.name} is closed")
            self._queue.put(submission)
        return submission.future

    def close(self, timeout: float | None = 5.0) -> None:
        """Finish what was submitted, then stop the worker threads (one stop mark each, queued
        after every accepted submission)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for _ in self._threads:
                self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout)

    # --- worker ---------------------------------------------------------------------------------

    def _others_expected(self) -> bool:
        return self.expected is None or self.expected() > 0 or self._last_submissions > 1

    def _collect(self, first: _Submission[T, R]) -> tuple[list[_Submission[T, R]], bool]:
        """The batch that starts with ``first``; True as second value when close() was seen."""
        batch, count = [first], len(first.items)
        deadline = time.monotonic() + self.max_wait_s
        while count < self.max_items:
            try:  # whatever is already queued joins without waiting
                nxt = self._queue.get_nowait()
            except queue.Empty:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._others_expected():
                    break
                try:
                    nxt = self._queue.get(timeout=min(remaining, _POLL_S))
                except queue.Empty:
                    continue
            if nxt is None:
                return batch, True
            batch.append(nxt)
            count += len(nxt.items)
        return batch, False

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            batch, stopping = self._collect(first)
            self._last_submissions = len(batch)
            self._execute(batch)

    def _execute(self, batch: list[_Submission[T, R]]) -> None:
        """Run one batch and hand every submission its slice. Whatever happens (a failing batch
        function, a caller that gave up and cancelled its future), every other submission of the
        batch still gets an answer and the worker lives on: a request must never wait forever.

        When the batch function raises on a batch of several submissions, each submission is run
        again alone, so the one that made it fail gets the error and the others their results: one
        caller's bad item must not fail the callers it happened to share a batch with."""
        items = [item for sub in batch for item in sub.items]
        try:
            results = self.fn(items)
            if len(results) != len(items):
                raise RuntimeError(f"{self.name}: batch function returned {len(results)} results for {len(items)} items")
        except BaseException as error:
            if isinstance(error, Exception) and len(batch) > 1:
                log.warning("%s: batch of %d items from %d submissions failed (%s); running each submission alone",
                            self.name, len(items), len(batch), error)  # fmt: skip
                for sub in batch:
                    self._execute([sub])
                return
            log.warning("%s: batch of %d items failed: %s", self.name, len(items), error)
            for sub in batch:
                _settle(sub.future, error=error)
            if not isinstance(error, Exception):
                raise
            return
        with self._stats_lock:
            self.stats.batches += 1
            self.stats.items += len(items)
            self.stats.submissions += len(batch)
            self.stats.largest = max(self.stats.largest, len(items))
        start = 0
        for sub in batch:
            answered = results[start : start + len(sub.items)]
            start += len(sub.items)
            if sub.rest:
                self._queue_rest(sub, answered)
            else:
                _settle(sub.future, result=sub.done + answered)

    def _queue_rest(self, sub: _Submission[T, R], answered: list[R]) -> None:
        """Queue the next slice of a sliced submission behind what arrived meanwhile. Once the
        batcher is closed its workers' stop marks are already queued, so the rest runs here, on
        this worker, before it stops (close() finishes what was submitted). A caller that gave up
        gets no more slices."""
        if sub.future.cancelled():
            return
        cut = len(sub.rest) if self.slice_items is None else self.slice_items
        nxt: _Submission[T, R] = _Submission(sub.rest[:cut], sub.future, sub.rest[cut:], sub.done + answered)
        with self._lock:
            if not self._closed:
                self._queue.put(nxt)
                return
        self._execute([nxt])


def _settle(future: Future, *, result: object = None, error: BaseException | None = None) -> None:
    """Resolve a submission's future unless its caller already gave up on it (cancelled)."""
    if not future.set_running_or_notify_cancel():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
