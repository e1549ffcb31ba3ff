"""The re-index soak of issue 41 (`tests/boundaries/reindex_soak.py` says what each part does).

About 20 re-index runs back to back, while a second process drops files into `incoming/` at random
moments (renamed into place, written in cut pieces, replaced, malformed, abandoned half-way, and one
symlink to a file outside), with a real `odqa serve` answering a bounded stream of requests to
BM25, dense and hybrid throughout. At the end:

- passages = the seed plus exactly the rows of the files the writer completed with valid rows;
- no request for a valid question failed;
- the service kept every retriever (each `/health` poll named bm25, dense and hybrid);
- no log, note or message holds a line of a refused file (the secrets behind the link and in the
  malformed records);
- each run either published, found nothing new, or failed loudly naming a malformed file (which
  it set aside, so the next run goes on).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odqa.storage import Workspace
from tests.boundaries.reindex_soak import (
    RETRIEVERS,
    SECRET_BAD,
    SECRET_LINK,
    RequestStream,
    readable_texts,
    secrets_found,
)
from tests.boundaries.release_builds import tiny_model
from tests.ops.input_files import PASSAGES, write_passages
from tests.serve.harness import REPO, ServiceProcess, subprocess_env

RUNS = int(os.environ.get("ODQA_SOAK_RUNS", "20"))  # benchmarks/bench_reindex_soak.py runs more
SETTLE_S = 1.5
SEED = 41


def _reindex(ws: Workspace, outcomes: list[str], messages: list[str]) -> None:
    """One run as the schedule makes it (no dump, no passages: the watch folder), its outcome kept."""
    from odqa.flows.compositions.ingest_run import MalformedFilesError
    from odqa.flows.compositions.reindex import reindex_flow

    try:
        report = reindex_flow(workspace=str(ws.root), settle_seconds=SETTLE_S, wait_seconds=120)
    except MalformedFilesError as error:  # loud, and the bad file is set aside: the next run goes on
        outcomes.append("malformed")
        messages.append(str(error))
        return
    outcomes.append("noop" if report.noop else "published")
    messages.append(json.dumps(report.as_dict(), default=str))


@pytest.mark.e2e
def test_reindex_soak(prefect_harness, tmp_path: Path) -> None:
    from odqa.flows.compositions.reindex import reindex_flow

    ws = Workspace.resolve(tmp_path / "ws")
    seed_file = write_passages(tmp_path / "seed.tsv", PASSAGES)
    model = tiny_model(tmp_path / "tiny", seed=3)
    first = reindex_flow(workspace=str(ws.root), passages=str(seed_file), model=model)  # BM25 + dense, model pinned
    assert not first.noop and first.figures["dense_vectors"] == len(PASSAGES)
    incoming, outside = ws.root / "incoming", tmp_path / "outside"
    outside.mkdir()
    manifest, stop = tmp_path / "manifest.json", tmp_path / "stop"
    outcomes: list[str] = []
    messages: list[str] = []
    started = time.perf_counter()
    with ServiceProcess(ws.root, "--retriever", "hybrid", log=tmp_path / "serve.log") as service, \
            RequestStream(service.url) as stream:  # fmt: skip
        writer = subprocess.Popen([sys.executable, "-m", "tests.boundaries.reindex_soak", str(incoming), str(outside),
                                   str(manifest), str(stop), str(SEED), str(SETTLE_S)], cwd=REPO,
                                  env=subprocess_env())  # fmt: skip
        try:
            for number in range(RUNS):
                if number == RUNS - 4:
                    stop.touch()  # the writer finishes its file, writes the manifest and exits
                _reindex(ws, outcomes, messages)
            assert writer.wait(timeout=120) == 0
            time.sleep(SETTLE_S + 0.5)
            _reindex(ws, outcomes, messages)  # the last files, settled
            _reindex(ws, outcomes, messages)
        finally:
            stop.touch()
            if writer.poll() is None:
                writer.kill()
        time.sleep(2)  # the service's next poll loads the last release; a few requests on it
    soak_s = time.perf_counter() - started
    written = json.loads(manifest.read_text(encoding="utf-8"))
    figures = {"runs": len(outcomes), **{o: outcomes.count(o) for o in ("published", "noop", "malformed")},
               "seconds": round(soak_s, 1), **stream.figures(), "events": written["events"]}  # fmt: skip
    if os.environ.get("ODQA_SOAK_FIGURES"):  # benchmarks/bench_reindex_soak.py records them
        Path(os.environ["ODQA_SOAK_FIGURES"]).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")

    expected = {(pid, text, title) for pid, text, title in PASSAGES}
    expected |= {tuple(row) for rows in written["complete"].values() for row in rows}
    got = {tuple(r.values()) for r in ws.sql("SELECT passage_id, text, title FROM passages").to_pylist()}
    assert got == expected, (sorted(got - expected)[:5], sorted(expected - got)[:5], figures)
    assert outcomes[-1] == "noop", outcomes  # everything complete was taken by then
    assert all(count >= 1 for count in written["events"].values()), written["events"]
    # each malformed file fails the one run that took it (two taken together fail one run)
    assert 1 <= outcomes.count("malformed") <= written["events"]["malformed"], (outcomes, written["events"])

    assert not stream.failures, stream.failures[:5]
    assert stream.served and all(served == tuple(sorted(RETRIEVERS)) for served in stream.served), set(stream.served)
    assert len(stream.versions) >= 2 and all(stream.latencies[name] for name in RETRIEVERS), figures

    texts = readable_texts(ws.root, [tmp_path / "serve.log"])
    texts.update({f"run {n} message": text for n, text in enumerate(messages)})
    texts["Prefect run logs"] = _prefect_logs(ws.root)
    assert not secrets_found(texts, [SECRET_LINK, SECRET_BAD])
    assert "a symbolic link: only files inside the folder are taken" in texts["Prefect run logs"]  # named, not read


def _prefect_logs(workspace: Path) -> str:
    """Every log line of this workspace's re-index flow runs, as the Prefect API hands them out."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    async def collect() -> str:
        async with get_client() as client:
            runs = await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["reindex"])),
                                               sort=FlowRunSort.START_TIME_ASC, limit=200, offset=0)  # fmt: skip
            ids = [str(run.id) for run in runs if run.parameters.get("workspace") == str(workspace)]
            lines: list[str] = []
            while True:
                response = await client._client.post("/logs/filter", json={
                    "logs": {"flow_run_id": {"any_": ids}}, "limit": 200, "offset": len(lines),
                    "sort": "TIMESTAMP_ASC"})  # fmt: skip
                response.raise_for_status()
                page = [entry["message"] for entry in response.json()]
                lines += page
                if len(page) < 200:
                    return "\n".join(lines)

    return asyncio.run(collect())
