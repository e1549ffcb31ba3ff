"""Progress for long loops, on a terminal and off it.

Every long loop (ingest, dump parsing, labelling, PAQ, BM25, encoding, index builds, training,
mining, QSFT) reports through :func:`progress`, so a user sees the same thing wherever the run
happens:

* on a terminal (stderr is a TTY): a tqdm bar;
* off a terminal (a Prefect worker, CI, ``cmd > log 2>&1``): a log record on the
  ``odqa.progress`` logger at most every ``ODQA_PROGRESS_INTERVAL`` seconds (default 30) and
  once at the end, with done/total, rate, elapsed, ETA and the loop's own fields (training's
  loss and learning rate). tqdm's default ``disable=None`` would print nothing at all there.

This module imports no Prefect (pipelines/ and models/ must run without it): flows route the
``odqa.progress`` logger into the flow run's logs (``flows.plumbing.runtime``), which is what Prefect's
UI shows in a run's log tab.

``ODQA_PROGRESS`` forces a mode: ``bar``, ``log`` or ``off``. Under torchrun only rank 0
reports (pass ``enabled=context.is_main``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from ..storage.sizes import format_bytes

LOGGER_NAME = "odqa.progress"
DEFAULT_INTERVAL_S = 30.0
MODES = ("bar", "log", "off")

T = TypeVar("T")

log = logging.getLogger(LOGGER_NAME)
# Progress records are INFO; a root logger at WARNING (Python's and Prefect's default) would
# swallow them before any handler (console, Prefect API) sees them.
if log.level == logging.NOTSET:
    log.setLevel(logging.INFO)


def progress_mode() -> str:
    """``bar`` on a terminal, ``log`` off it, unless ``ODQA_PROGRESS`` says otherwise."""
    forced = os.environ.get("ODQA_PROGRESS", "").strip().lower()
    if forced:
        if forced not in MODES:
            raise ValueError(f"ODQA_PROGRESS={forced!r}: expected one of {', '.join(MODES)}")
        return forced
    stream = sys.stderr
    return "bar" if stream is not None and hasattr(stream, "isatty") and stream.isatty() else "log"


def progress_interval() -> float:
    """Seconds between two log records off a terminal (``ODQA_PROGRESS_INTERVAL``, default 30)."""
    raw = os.environ.get("ODQA_PROGRESS_INTERVAL", "")
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError as exc:
        raise ValueError(f"ODQA_PROGRESS_INTERVAL={raw!r}: expected a number of seconds") from exc
    if value < 0:
        raise ValueError(f"ODQA_PROGRESS_INTERVAL={raw!r}: expected a number of seconds >= 0")
    return value


def format_duration(seconds: float) -> str:
    """``1:02:03`` / ``2:03`` for a duration, ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_count(value: float) -> str:
    """Thousands separators for counts; a float keeps one decimal."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def format_field(value: Any) -> str:
    """Loss-like floats in 4 significant digits, tiny ones (learning rates) in e-notation."""
    if isinstance(value, float):
        if value != 0 and abs(value) < 1e-3:
            return f"{value:.2e}"
        return f"{value:.4g}"
    return str(value)


class Progress:
    """One loop's progress; use as a context manager, call :meth:`update` per unit of work.

    ``fields`` passed to :meth:`update` or :meth:`set_fields` (loss, lr, ...) are shown on the
    bar and in every log record; the latest value of each wins. ``leave=False`` is for short
    inner loops run many times (encoding one chunk of questions): the bar vanishes when done and,
    off a terminal, the final record is written only if the loop lasted long enough to log one.
    """

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str = "it",
        *,
        initial: int = 0,
        enabled: bool = True,
        leave: bool = True,
        mode: str | None = None,
        interval: float | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.total = total
        self.desc = desc
        self.unit = unit
        self.n = initial
        self.initial = initial
        self.fields: dict[str, Any] = {}
        self.leave = leave
        self.mode = "off" if not enabled else (mode or progress_mode())
        self.interval = progress_interval() if interval is None else interval
        self.logger = logger or log
        self.started = time.monotonic()
        self.last_logged = self.started
        self.records = 0
        self.closed = False
        self._bar = None
        if self.mode == "bar":
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=True,
                             smoothing=0.05, dynamic_ncols=True, leave=leave)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # A generator whose consumer stopped early is closed with GeneratorExit: not a failure.
        self.close(failed=exc_type is not None and not issubclass(exc_type, GeneratorExit))

    def set_fields(self, **fields: Any) -> None:
        """Update the extra fields (e.g. ``loss=``, ``lr=``) without advancing."""
        self.fields.update(fields)
        if self._bar is not None:
            self._bar.set_postfix({k: format_field(v) for k, v in self.fields.items()}, refresh=False)

    def update(self, n: int = 1, **fields: Any) -> None:
        """Advance by ``n`` units; off a terminal, log when the interval has passed."""
        self.n += n
        if fields:
            self.set_fields(**fields)
        if self._bar is not None:
            self._bar.update(n)
        elif self.mode == "log":
            now = time.monotonic()
            if now - self.last_logged >= self.interval:
                self._log(now)

    def restart(self, total: int | None, done: int) -> None:
        """Count again from ``done`` of ``total`` (a download that starts over, or resumes at
        another byte): the rate and ETA then cover the work from here on."""
        self.total, self.n, self.initial = total, done, done
        self.started = time.monotonic()
        if self._bar is not None:
            self._bar.reset(total=total)
            self._bar.update(done)

    def close(self, failed: bool = False) -> None:
        """End the loop: the bar closes, off a terminal one final record (``done`` or ``stopped``)."""
        if self.closed:
            return
        self.closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.mode == "log" and (self.leave or self.records or failed):
            self._log(time.monotonic(), final="stopped" if failed else "done")

    def rate(self, now: float | None = None) -> float:
        """Units per second since the loop started (work done before a resume not counted)."""
        elapsed = (now or time.monotonic()) - self.started
        return (self.n - self.initial) / elapsed if elapsed > 0 else float("nan")

    def eta(self, now: float | None = None) -> float:
        """Seconds left at the current rate; NaN without a total or a rate."""
        rate = self.rate(now)
        if self.total is None or not rate or not math.isfinite(rate):
            return float("nan")
        return max(0.0, (self.total - self.n) / rate)

    def message(self, now: float | None = None, final: str | None = None) -> str:
        """The one-line record: ``desc: done/total unit (pct) | rate | elapsed | ETA | fields``."""
        now = now or time.monotonic()
        parts = []
        if self.total:
            parts.append(f"{self.desc}: {self._amount(self.n, self.total)} ({100.0 * self.n / self.total:.1f}%)")
        else:
            parts.append(f"{self.desc}: {self._amount(self.n)}")
        rate = self.rate(now)
        if math.isfinite(rate) and self.unit == "B":
            parts.append(f"{format_bytes(rate)}/s")
        elif math.isfinite(rate):
            parts.append(f"{rate:,.3g} {self.unit}/s" if rate < 100 else f"{rate:,.0f} {self.unit}/s")
        parts.append(f"elapsed {format_duration(now - self.started)}")
        if final is None:
            parts.append(f"ETA {format_duration(self.eta(now))}")
        else:
            parts.append(final)
        if self.fields:
            parts.append(" ".join(f"{k}={format_field(v)}" for k, v in self.fields.items()))
        return " | ".join(parts)

    def _amount(self, done: float, total: float | None = None) -> str:
        """``130/400 step``; bytes in binary units (``1.3 GiB/4.4 GiB``, not 1,395,864,371 B)."""
        if self.unit == "B":
            return "/".join(format_bytes(v) for v in (done, total) if v is not None)
        return "/".join(format_count(v) for v in (done, total) if v is not None) + f" {self.unit}"

    def _log(self, now: float, final: str | None = None) -> None:
        self.last_logged = now
        self.records += 1
        if self.logger.hasHandlers():
            self.logger.info(self.message(now, final))
        else:  # a bare script: no logging configured, still show progress on stderr
            print(self.message(now, final), file=sys.stderr, flush=True)


def progress(
    total: int | None,
    desc: str,
    unit: str = "it",
    **options: Any,
) -> Progress:
    """A :class:`Progress` for a loop of ``total`` units (``None`` when unknown)."""
    return Progress(total, desc, unit, **options)


def track(
    iterable: Iterable[T],
    desc: str,
    unit: str = "it",
    total: int | None = None,
    **options: Any,
) -> Iterator[T]:
    """Iterate ``iterable`` with progress (one unit per item); the total from ``len()`` if it has one."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with Progress(total, desc, unit, **options) as bar:
        for item in iterable:
            yield item
            bar.update(1)
