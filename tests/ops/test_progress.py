"""pipelines.progress: mode selection, rate-limited records off a terminal, the record's text."""

from __future__ import annotations

import io
import logging
import types

import pytest

import odqa.pipelines.progress as progress_module
from odqa.pipelines.progress import Progress, progress, progress_interval, progress_mode, track


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(progress_module, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


class Records(list):
    """Messages logged on ``.logger`` (passed to Progress as ``logger=``)."""

    logger: logging.Logger


@pytest.fixture
def records() -> Records:
    seen = Records()

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("odqa.progress.test")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = Collect()
    logger.addHandler(handler)
    seen.logger = logger
    yield seen
    logger.removeHandler(handler)


def test_mode_follows_the_terminal_unless_forced(monkeypatch):
    monkeypatch.delenv("ODQA_PROGRESS", raising=False)
    tty = types.SimpleNamespace(isatty=lambda: True)
    monkeypatch.setattr(progress_module.sys, "stderr", tty)
    assert progress_mode() == "bar"
    monkeypatch.setattr(progress_module.sys, "stderr", io.StringIO())
    assert progress_mode() == "log"
    monkeypatch.setattr(progress_module.sys, "stderr", None)  # pythonw, some daemons
    assert progress_mode() == "log"
    monkeypatch.setenv("ODQA_PROGRESS", "OFF")
    assert progress_mode() == "off"
    monkeypatch.setenv("ODQA_PROGRESS", "loud")
    with pytest.raises(ValueError, match="ODQA_PROGRESS='loud'"):
        progress_mode()


def test_interval_from_the_environment(monkeypatch):
    monkeypatch.delenv("ODQA_PROGRESS_INTERVAL", raising=False)
    assert progress_interval() == 30.0
    monkeypatch.setenv("ODQA_PROGRESS_INTERVAL", "2.5")
    assert progress_interval() == 2.5
    for bad in ("soon", "-1"):
        monkeypatch.setenv("ODQA_PROGRESS_INTERVAL", bad)
        with pytest.raises(ValueError, match="ODQA_PROGRESS_INTERVAL"):
            progress_interval()


def test_records_are_rate_limited_and_end_with_a_final_one(clock, records):
    with progress(100, "encode", "psg", mode="log", interval=10, logger=records.logger) as bar:
        for _ in range(100):
            clock.now += 0.5  # 2 units/s: 50 s in all
            bar.update(1)
    # one record per 10 s (at 10, 20, 30, 40 s; the 50 s one is due at the last update too), then "done"
    assert len(records) == 6
    assert all("ETA" in r for r in records[:-1])
    assert records[-1].endswith("done")
    assert records[0].startswith("encode: 20/100 psg (20.0%) | 2 psg/s | elapsed 0:10 | ETA 0:40")


def test_message_has_rate_eta_and_fields(clock, records):
    bar = Progress(400, "train taser", "step", initial=100, mode="log", interval=30, logger=records.logger)
    clock.now += 20
    bar.update(20, loss=0.6931, lr=2e-5, examples_per_s=12.0)  # 1 step/s since the (resumed) start
    assert records == []  # not yet 30 s since the start
    clock.now += 10
    bar.update(10, loss=0.5)
    assert records == [
        "train taser: 130/400 step (32.5%) | 1 step/s | elapsed 0:30 | ETA 4:30 | loss=0.5 lr=2.00e-05 "
        "examples_per_s=12"
    ]
    bar.close()
    assert records[-1].startswith("train taser: 130/400 step (32.5%)") and "| done |" in records[-1]


def test_unknown_total_and_failure(clock, records):
    with pytest.raises(RuntimeError), progress(None, "ingest dump.xml", "pages", mode="log", interval=30,
                                               logger=records.logger) as bar:  # fmt: skip
        clock.now += 4
        bar.update(1000)
        raise RuntimeError("bad page")
    assert records == ["ingest dump.xml: 1,000 pages | 250 pages/s | elapsed 0:04 | stopped"]


def test_a_generator_closed_by_its_consumer_is_not_a_failure(clock, records):
    def chunks():
        with progress(6, "dense search", "questions", mode="log", interval=30, logger=records.logger) as bar:
            for start in range(0, 6, 3):
                bar.update(3)
                yield start

    stream = chunks()
    assert next(stream) == 0 and next(stream) == 3
    stream.close()  # the consumer had what it needed: GeneratorExit inside the loop
    assert records == ["dense search: 6/6 questions (100.0%) | elapsed 0:00 | done"]


def test_short_inner_loops_with_leave_false_log_nothing(clock, records):
    for _ in range(3):  # e.g. encoding one chunk of questions, many times
        with progress(8, "encode questions", "questions", leave=False, mode="log", interval=30,
                      logger=records.logger) as bar:  # fmt: skip
            bar.update(8)
    assert records == []
    with progress(8, "encode questions", "questions", leave=False, mode="log", interval=30,
                  logger=records.logger) as bar:  # fmt: skip
        clock.now += 31
        bar.update(4)  # a long one logged: its end is logged too
        bar.update(4)
    assert len(records) == 2 and records[-1].endswith("done")


def test_disabled_and_off_modes_log_nothing(clock, records, monkeypatch):
    with progress(5, "rank 1", enabled=False, mode="log", interval=0, logger=records.logger) as bar:
        bar.update(5)
    monkeypatch.setenv("ODQA_PROGRESS", "off")
    assert list(track(range(3), "quiet", interval=0, logger=records.logger)) == [0, 1, 2]
    assert records == []


def test_track_counts_items_and_uses_len(clock, records):
    assert list(track([1, 2, 3], "items", "it", mode="log", interval=0, logger=records.logger)) == [1, 2, 3]
    assert records[0].startswith("items: 1/3 it (33.3%)") and records[-1].startswith("items: 3/3 it (100.0%)")


def test_without_any_logging_setup_records_go_to_stderr(clock, capsys):
    bare = logging.getLogger("odqa-bare-test")  # not under "odqa": no handlers anywhere above it
    bare.propagate = False
    bare.setLevel(logging.INFO)
    with progress(2, "bare", "it", mode="log", interval=30, logger=bare) as bar:
        bar.update(2)
    assert "bare: 2/2 it (100.0%)" in capsys.readouterr().err


def test_bytes_in_binary_units_and_a_restart_counts_from_its_byte(clock, records):
    """A download's record: sizes and rate in KiB/MiB/GiB; a download that resumes (or starts
    over) at another byte counts its rate and ETA from there."""
    bar = Progress(None, "fetch psgs_w100.tsv.gz", "B", mode="log", interval=30, logger=records.logger)
    bar.restart(4_694_541_059, 1 << 30)  # resumed after 1 GiB
    clock.now += 30
    bar.update(300 << 20)  # 10 MiB/s
    assert records == ["fetch psgs_w100.tsv.gz: 1.3 GiB/4.4 GiB (29.6%) | 10.0 MiB/s | elapsed 0:30 | ETA 5:15"]
    bar.restart(None, 0)  # the server ignored the range: from byte 0, size unknown
    clock.now += 2
    bar.update(1000)
    bar.close()
    assert records[-1] == "fetch psgs_w100.tsv.gz: 1,000 B | 500 B/s | elapsed 0:02 | done"
