"""`odqa serve`'s BM25 searcher shared fairly: how long a one-question search waits beside a large request.

    .venv/bin/python benchmarks/bench_serve_fairness.py [--workspace DIR] [--repeats 3]
        [--slices 0,32] [--out benchmarks/results/serve_fairness.json]

The BM25 searcher is one JVM searcher, so its batches run one after another; a request's
questions are searched `BatchSettings.bm25_slice` at a time, each next slice queued behind what
arrived meanwhile (`pipelines/microbatch.py`). For each slice size (0: no slicing, the behaviour
before) the service runs in this process over the workspace's BM25 release (one service at a
time, the slice sizes taking turns in each repeat), and each repeat sends
a large request (256 questions of 2,000 characters of the corpus's own words, k=390) and, 0.5 s
after it, a one-question search (k=3): the seconds each took, side by side in one run.

Without `--workspace`, one is built in a temporary folder: `odqa import passages` of squad24's
1,154 real passages (`../shared/data/squad24/passages.tsv`; the bundled `sample/own-data` when it
is absent), then `odqa bm25 index`; its Prefect server is stopped afterwards.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from odqa.service.app import create_app  # noqa: E402
from odqa.service.releases import BatchSettings  # noqa: E402
from tests.serve.harness import ServiceThread, subprocess_env  # noqa: E402

SQUAD24 = ROOT.parent / "shared" / "data" / "squad24" / "passages.tsv"
SAMPLE = ROOT / "sample" / "own-data" / "passages.tsv"


def build_workspace(root: Path, passages: Path) -> None:
    odqa = [sys.executable, "-c", "from odqa.flows.cli import main; main()", "-w", str(root)]
    for verb in (["import", "passages", "--format", "dpr-tsv", str(passages)], ["bm25", "index"]):
        subprocess.run([*odqa, *verb], check=True, env=subprocess_env(), cwd=ROOT, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "odqa.flows.plumbing.server", "stop", "-w", str(root)],
                   env=subprocess_env(), cwd=ROOT, stdout=subprocess.DEVNULL, check=False)  # fmt: skip


def large_questions(passages: Path, count: int = 256, chars: int = 2000) -> list[str]:
    """`count` questions of `chars` characters drawn from the corpus's words (seeded)."""
    with passages.open(encoding="utf-8", newline="") as handle:
        words = sorted({w for row in csv.reader(handle, delimiter="\t") for w in row[1].lower().split() if w.isalpha()})
    rng = random.Random(0)
    return [" ".join(rng.choice(words) for _ in range(chars // 4))[:chars] for _ in range(count)]


def timed_post(url: str, body: dict) -> float:
    started = time.perf_counter()
    response = requests.post(f"{url}/search", json=body, timeout=300)
    response.raise_for_status()
    return round(time.perf_counter() - started, 2)


def one_round(url: str, questions: list[str]) -> dict[str, float]:
    """The large request, and a one-question search sent 0.5 s after it: seconds each took."""
    took: dict[str, float] = {}
    large = threading.Thread(target=lambda: took.__setitem__(
        "large_s", timed_post(url, {"questions": questions, "k": 390, "retriever": "bm25"})))  # fmt: skip
    large.start()
    time.sleep(0.5)
    took["small_s"] = timed_post(url, {"question": "Where was Marie Curie born?", "k": 3, "retriever": "bm25"})
    large.join()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", type=Path, default=None)
    parser.add_argument("--passages", type=Path, default=SQUAD24 if SQUAD24.is_file() else SAMPLE)
    parser.add_argument("--slices", type=lambda text: [int(s) for s in text.split(",")], default=[0, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    workspace = args.workspace
    if workspace is None:
        workspace = Path(tempfile.mkdtemp(prefix="odqa-fairness-")) / "ws"
        build_workspace(workspace, args.passages)
    questions = large_questions(args.passages)
    rounds: dict[int, list[dict[str, float]]] = {cut: [] for cut in args.slices}
    for _ in range(args.repeats):  # interleaved: the machine's drift weighs on every slice size alike
        for cut in args.slices:  # one service at a time (a workspace registers one service)
            app = create_app(workspace, retriever="bm25", batching=BatchSettings(bm25_slice=cut or 1_000_000))
            with ServiceThread(app) as service:
                timed_post(service.url, {"question": "warm up", "k": 1, "retriever": "bm25"})  # its release loaded
                rounds[cut].append(one_round(service.url, questions))
    report = {"passages": str(args.passages), "repeats": args.repeats, "large_request": "256 questions x 2,000 chars, k=390",
              "by_slice": {str(cut): {"small_s_median": round(statistics.median(r["small_s"] for r in runs), 2),
                                      "large_s_median": round(statistics.median(r["large_s"] for r in runs), 2),
                                      "rounds": runs} for cut, runs in rounds.items()}}  # fmt: skip
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
