"""Stage reports read the same on the terminal and in the Prefect UI's run logs: `key: value`
lines, no `None` or `null` for what does not apply (at any depth), no Python reprs, and an
index's settings only where its type uses them."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from odqa.flows.plumbing.report_text import log_report, report_text
from odqa.flows.stages.index import IndexBuildReport
from odqa.flows.stages.retrieve import RetrieveReport
from odqa.pipelines.dense.faiss_index import IndexParams, applicable_params
from odqa.storage.reports import Report


@dataclass
class Part:
    file: str
    count: int
    note: str | None = None


class Options(BaseModel):
    pooling: str | None = None
    layers: int = 6


@dataclass
class NestedReport(Report):
    name: str
    settings: dict[str, Any]
    part: Part
    options: Options
    tags: list[str | None] = field(default_factory=list)
    missing: int | None = None


def test_what_does_not_apply_is_left_out_at_every_depth_and_nothing_is_a_repr() -> None:
    report = NestedReport(name="x", settings={"k1": 0.9, "alpha": None, "bm25": {"b": None}, "depth": 100},
                          part=Part("a.faiss", 3), options=Options(), tags=["a", None])  # fmt: skip
    text = report_text("stage x", report)
    assert text.splitlines() == [
        "stage x: done",
        "      name: x",
        '  settings: {"depth": 100, "k1": 0.9}',
        '      part: {"count": 3, "file": "a.faiss"}',
        '   options: {"layers": 6}',
        '      tags: ["a"]',
    ]
    assert "None" not in text and "null" not in text and "Part(" not in text and "missing" not in text


def test_a_flat_index_shows_no_hnsw_or_ivfpq_settings() -> None:
    stored = IndexParams().to_dict()
    assert applicable_params("flat", stored) == {}
    assert applicable_params("hnsw", stored) == {"hnsw_m": 64, "ef_construction": 200, "ef_search": 128}
    assert set(applicable_params("ivfpq", {**stored, "max_part_vectors": 10})) == {
        "pq_nbits", "nprobe", "train_size", "seed", "max_part_vectors"}  # nlist, pq_m: None (chosen at build time)
    retrieve = RetrieveReport(run="dense-dev", retriever="dense", dataset="d", split="dev", k=3, questions=2,
                              questions_without_results=0, rows=6,
                              config={"model": "m1", "model_path": "m1", "index_type": "flat",
                                      "index_model_fingerprint": "f" * 64, "index_params": stored})  # fmt: skip
    text = report_text("retrieve", retrieve)
    assert "index_params" not in text and "nlist" not in text and "model_path" not in text, text
    assert "batches" not in text and "trec" not in text  # no task runner, no TREC file: not shown
    assert max(len(line) for line in text.splitlines()) < 120, text  # a long config gets a line per entry
    assert re.search(r"\n +config\.index_type: flat\n", text), text


def test_the_run_log_gets_the_text_the_terminal_gets(caplog: pytest.LogCaptureFixture) -> None:
    report = IndexBuildReport(model="m1", index="/ws/flat", type="flat", vectors=10, parts=1,
                              params=applicable_params("flat", IndexParams().to_dict()))  # fmt: skip
    with caplog.at_level(logging.INFO, logger="odqa"):
        log_report("index build m1", report)
    assert [r.getMessage() for r in caplog.records] == [report_text("index build m1", report)]
    assert "params" not in caplog.text and "release" not in caplog.text
