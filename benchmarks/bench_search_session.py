"""Issue 32: a 10-question `odqa search` session against one question plus 10 x the service's p50.

    .venv/bin/python benchmarks/bench_search_session.py --workspace WS --questions QAS.tsv
        [--model MODEL] [--repeats 3] [--port 8765]

The workspace must hold the indexes (BM25; with --model its flat FAISS index). Measured, each in
a fresh process and interleaved per repeat (the machine is shared: medians, load printed):

* one: `odqa search "<first question>"`;
* session: the first 10 questions of QAS.tsv (DPR qas: question, tab, answers) piped, one per line,
  through one `odqa search`;
* p50: `odqa serve` (same retriever) answering each of the 10 questions 5 times, one request at a
  time, client-side latency; the server is started once and stopped at the end.

Target: session <= 1.2 x (one + 10 x p50).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
ODQA = str(ROOT / ".venv" / "bin" / "odqa")


def timed(command: list[str], stdin: str | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(command, input=stdin, text=True, check=True, capture_output=True, cwd=ROOT, timeout=1200)
    return time.perf_counter() - started


def service_p50(workspace: str, retriever: str, model: str | None, questions: list[str], port: int) -> float:
    """Median latency of single POST /search requests to a running `odqa serve`."""
    command = [ODQA, "-w", workspace, "serve", "--port", str(port), "--retriever", retriever]
    server = subprocess.Popen(command + (["--model", model] if model else []), cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900
        while True:
            try:
                if requests.get(f"{url}/health", timeout=5).json().get("status") == "ok":
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("odqa serve did not become ready")
            time.sleep(1)
        latencies = []
        for question in questions * 5:
            started = time.perf_counter()
            reply = requests.post(f"{url}/search", json={"question": question, "k": 5, "retriever": retriever},
                                  timeout=120)  # fmt: skip
            latencies.append(time.perf_counter() - started)
            reply.raise_for_status()
        return statistics.median(latencies)
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--model", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    questions = [line.split("\t")[0] for line in args.questions.read_text(encoding="utf-8").splitlines()[:10]]
    retriever = "dense" if args.model else "bm25"
    search = [ODQA, "-w", args.workspace, "search", "--k", "5"] + (["--model", args.model] if args.model else [])
    load = os.getloadavg()[0]
    ones, sessions = [], []
    for repeat in range(args.repeats):
        pair = [("one", lambda: timed([*search, questions[0]])),
                ("session", lambda: timed(search, "".join(q + "\n" for q in questions)))]  # fmt: skip
        for name, run in pair if repeat % 2 == 0 else pair[::-1]:
            (ones if name == "one" else sessions).append(run())
            print(f"  {name}: {(ones if name == 'one' else sessions)[-1]:.2f}s", file=sys.stderr, flush=True)
    p50 = service_p50(args.workspace, retriever, args.model, questions, args.port)
    one, session = statistics.median(ones), statistics.median(sessions)
    budget = one + 10 * p50
    print(f"{retriever}: load average {load:.1f} -> {os.getloadavg()[0]:.1f}; {args.repeats} repeats, medians")
    print(f"one question {one:.2f}s; 10-question session {session:.2f}s; service p50 {p50 * 1000:.0f} ms; "
          f"one + 10 x p50 = {budget:.2f}s; session / (one + 10 x p50) = {session / budget:.2f}")


if __name__ == "__main__":
    main()
