"""Acceptance: the path a new user takes. Import passages, `odqa bm25 index`, `odqa serve` answers
from that index at once; `odqa index build` and the running service answers dense and hybrid
too; `odqa reindex` with a changed passages file switches it to the new release with zero failed
requests while clients keep asking."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import requests

from odqa.pipelines.retrieval.java import JavaMissingError, check_java
from tests.serve.harness import ServiceProcess, minilm
from tests.serve.load import MARKERS, LoadGenerator, assert_no_problems

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CORPUS = [
    ("curie-1", "Marie Curie was born in Warsaw in 1867 and studied physics and chemistry in Paris.", "Marie Curie"),
    ("curie-2", "Marie Curie won two Nobel Prizes, in physics and in chemistry.", "Marie Curie"),
    ("zurich-1", "The Limmat river flows through Zurich before it joins the Aare.", "Zurich"),
    ("paris-1", "The Seine flows through Paris, past the Louvre and Notre-Dame.", "Paris"),
    ("louvre-1", "The Mona Lisa by Leonardo da Vinci hangs in the Louvre in Paris.", "Mona Lisa"),
    ("warsaw-1", "Warsaw is the capital of Poland and lies on the Vistula river.", "Warsaw"),
    ("alps-1", "The Matterhorn is a mountain of the Alps on the border of Switzerland and Italy.", "Matterhorn"),
    ("nile-1", "The Nile flows north through Egypt into the Mediterranean Sea.", "Nile"),
    # every question of the load generator finds something, with or without its marker passage
    ("quenby-1", "Quenby is an old market town: a town square, a spring festival, a bridge, a tower.", "Quenby"),
]


def _write_corpus(path: Path, *markers: str) -> Path:
    rows = [*CORPUS, *((m, MARKERS[m][1], MARKERS[m][0]) for m in markers)]
    path.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{text}\t{title}\n" for i, text, title in rows),
                    encoding="utf-8")  # fmt: skip
    return path


def _search(url: str, retriever: str, **extra) -> requests.Response:
    return requests.post(f"{url}/search", json={"question": "Where was Marie Curie born?", "k": 3,
                                                "retriever": retriever, **extra}, timeout=60)  # fmt: skip


def _wait_for_new_version(url: str, old: str, seconds: float = 120) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        version = requests.get(f"{url}/health", timeout=10).json()["version"]
        if version != old:
            return version
        time.sleep(0.3)
    raise AssertionError(f"the service stayed on {old} for {seconds:.0f}s")


def test_import_index_serve_and_reindex_as_a_new_user_would(cli, tmp_path: Path) -> None:
    try:
        check_java()
    except JavaMissingError as error:
        pytest.skip(f"BM25 needs a JDK: {error}")
    ws = tmp_path / "ws"
    corpus = _write_corpus(tmp_path / "passages.tsv")
    cli("--workspace", str(ws), "import", "passages", "--format", "dpr-tsv", str(corpus))
    cli("--workspace", str(ws), "bm25", "index")

    with ServiceProcess(ws, "--retriever", "bm25", "--poll-seconds", "0.3", log=tmp_path / "serve.log") as service:
        first = requests.get(f"{service.url}/health", timeout=10).json()["version"]
        reply = _search(service.url, "bm25")
        assert reply.status_code == 200, reply.text
        assert reply.json()["results"][0]["hits"][0]["passage_id"] == "curie-1"
        assert reply.json()["version"] == first
        no_dense = _search(service.url, "dense")
        assert no_dense.status_code == 400 and "no dense index" in no_dense.json()["error"]

        cli("--workspace", str(ws), "index", "build", "--model", minilm())
        second = _wait_for_new_version(service.url, first)
        for retriever in ("dense", "bm25", "hybrid"):
            reply = _search(service.url, retriever, alpha=1.0)
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert body["version"] == second and body["results"][0]["hits"][0]["title"] == "Marie Curie", body

        load = LoadGenerator(service.url)
        stop = threading.Event()

        def keep_asking() -> None:
            while not stop.is_set():
                load.cycle(1.0, levels=(1, 8))

        asking = threading.Thread(target=keep_asking, daemon=True)
        asking.start()
        try:
            time.sleep(1.0)
            _write_corpus(corpus, "marker-1")  # the same file, changed: its rows are replaced
            reindexed = cli("--workspace", str(ws), "reindex", "--passages", str(corpus), "--model", minilm())
            third = _wait_for_new_version(service.url, second)
            time.sleep(2.5)  # clients on the new release too
        finally:
            stop.set()
            asking.join(timeout=120)
        log = service.log_text(load.answers)

    assert "reindex" in reindexed.output and third in reindexed.output
    assert_no_problems(load.answers, {second: set(), third: {"marker-1"}}, log)
    assert {a.version for a in load.answers} == {second, third}
    assert f"freed release {second}" in log
