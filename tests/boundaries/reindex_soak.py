"""The re-index soak (issue 41): re-index runs back to back while a second process drops files into
`incoming/` at random moments and `odqa serve` answers a bounded stream of requests.

Used by `tests/boundaries/test_reindex_soak.py` (20 runs) and `benchmarks/bench_reindex_soak.py`
(the recorded figures). Three parts:

* `main` is the **writer**, run as its own process (`python -m tests.boundaries.reindex_soak ...`):
  until told to stop (a stop file appears) it drops one file every 0.3-2.5 s, of one of these kinds,
  each kind at least once:

  - ``renamed``: written as ``.NAME.part`` and renamed into place (the documented way);
  - ``cut``: written in place in pieces, with pauses that cut it mid-line, shorter than the settle
    time (a slow copy that runs see half-written);
  - ``replaced``: a complete file written again with new rows (renamed over the old one);
  - ``malformed``: complete, with one record of two fields that holds a secret;
  - ``abandoned``: a ``.part`` file never renamed (a writer killed half-way);
  - ``link``: a symlink to a valid passages file outside the folder, whose text holds a secret.

  At the end it writes a manifest: every file it completed with valid rows (in their last version),
  and the secrets. Passages = the seed plus exactly those rows, whatever the runs saw.
* `RequestStream` is the client: valid questions to every retriever (BM25, dense, hybrid with an
  alpha) at a bounded rate, and `/health` polls that record what the service serves.
* `secrets_found` looks for the secrets in every log, report and message a user or another local
  process can read.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

QUESTIONS = ["What is the longest river of Zorbania?", "What is the capital of Vexland?",
             "Which composer wrote the opera Glass Tides?", "What is Farnwick known for?"]  # fmt: skip
RETRIEVERS = ("bm25", "dense", "hybrid")
KINDS = ("renamed", "cut", "replaced", "malformed", "abandoned", "link")
SECRET_LINK = "SECRET-LINK-9d41"
SECRET_BAD = "SECRET-BAD-7e02"
HEADER = "id\ttext\ttitle\n"
WORDS = ("river", "harbour", "granite", "opera", "copper", "valley", "bridge", "tower", "island", "forest")


def _rows(tag: str, count: int, rng: random.Random) -> list[list[str]]:
    return [[f"{tag}-{n}", f"The {' '.join(rng.choice(WORDS) for _ in range(6))} of {tag} number {n}.",
             f"Place {tag}"] for n in range(count)]  # fmt: skip


def _text(rows: list[list[str]]) -> str:
    return HEADER + "".join("\t".join(row) + "\n" for row in rows)


def _renamed(folder: Path, name: str, text: str) -> None:
    part = folder / f".{name}.part"
    part.write_text(text, encoding="utf-8")
    os.replace(part, folder / name)


def _cut(folder: Path, name: str, text: str, rng: random.Random, settle_s: float) -> None:
    """Write `text` in 3-5 pieces, cut at random bytes (mid-line), pausing under half the settle time."""
    cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(2, 4))))
    with open(folder / name, "w", encoding="utf-8") as handle:
        start = 0
        for end in [*cuts, len(text)]:
            handle.write(text[start:end])
            handle.flush()
            start = end
            if end < len(text):
                time.sleep(rng.uniform(0.05, settle_s / 2))


def main(argv: list[str]) -> int:
    """The writer: `INCOMING OUTSIDE MANIFEST STOPFILE SEED SETTLE_S`."""
    incoming, outside, manifest, stop = (Path(a) for a in argv[:4])
    rng, settle_s = random.Random(int(argv[4])), float(argv[5])
    complete: dict[str, list[list[str]]] = {}
    kinds = list(KINDS)
    rng.shuffle(kinds)  # every kind at least once, in a random order, then at random
    events: dict[str, int] = {kind: 0 for kind in KINDS}
    number = 0
    while not stop.exists() or kinds:
        time.sleep(rng.uniform(0.3, 2.5))
        owed = bool(kinds)  # still in the pass that makes every kind once
        kind = kinds.pop() if owed else rng.choice(("renamed", "renamed", "cut", "cut", "replaced", "malformed"))
        if kind == "replaced" and not complete:  # nothing to replace yet: a new file now, the replacement later
            if owed:
                kinds.insert(0, "replaced")
            kind = "renamed"
        number += 1
        tag = f"w{number}"
        if kind in ("renamed", "cut"):
            rows = _rows(tag, rng.randint(2, 6), rng)
            name = f"{tag}.tsv"
            _renamed(incoming, name, _text(rows)) if kind == "renamed" else _cut(incoming, name, _text(rows), rng, settle_s)
            complete[name] = rows
        elif kind == "replaced":
            name = rng.choice(sorted(complete))
            rows = _rows(f"{tag}r", rng.randint(2, 6), rng)
            _renamed(incoming, name, _text(rows))
            complete[name] = rows
        elif kind == "malformed":
            rows = _rows(tag, 3, rng)
            text = _text(rows) + f"{tag}-bad\tthe record {SECRET_BAD} has two fields\n"
            _renamed(incoming, f"{tag}.tsv", text)
        elif kind == "abandoned":
            (incoming / f"{tag}.tsv.part").write_text(_text(_rows(tag, 3, rng))[:40], encoding="utf-8")
        else:
            target = outside / f"{tag}-outside.tsv"
            target.write_text(_text([[f"{tag}-x", f"Behind the link: {SECRET_LINK}.", "Outside"]]), encoding="utf-8")
            (incoming / f"{tag}.tsv").symlink_to(target)
        events[kind] += 1
    manifest.write_text(json.dumps({"complete": complete, "events": events,
                                    "secrets": [SECRET_LINK, SECRET_BAD]}), encoding="utf-8")  # fmt: skip
    return 0


@dataclass
class RequestStream:
    """Valid questions to every retriever of `url` at about `rate` requests/s, and `/health` polls."""

    url: str
    rate: float = 8.0
    latencies: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in RETRIEVERS})
    failures: list[str] = field(default_factory=list)
    served: list[tuple[str, ...]] = field(default_factory=list)  # the retrievers /health named, each poll
    versions: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-requests", daemon=True)

    def __enter__(self) -> RequestStream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def _run(self) -> None:
        session = requests.Session()
        turn = 0
        while not self._stop.is_set():
            retriever, question = RETRIEVERS[turn % 3], QUESTIONS[turn % len(QUESTIONS)]
            body = {"question": question, "k": 5, "retriever": retriever, **({"alpha": 1.0} if retriever == "hybrid" else {})}
            started = time.perf_counter()
            try:
                reply = session.post(f"{self.url}/search", json=body, timeout=60)
                # BM25 returns only passages that share a term with the question: at least one here
                if reply.status_code != 200 or not reply.json()["results"][0]["hits"]:
                    self.failures.append(f"{retriever}: HTTP {reply.status_code} {reply.text[:300]}")
                else:
                    self.latencies[retriever].append(time.perf_counter() - started)
                    self.versions.add(reply.json()["version"])
            except (requests.RequestException, ValueError, KeyError, IndexError) as error:
                self.failures.append(f"{retriever}: {type(error).__name__}: {error}")
            if turn % 6 == 0:
                self._poll_health(session)
            turn += 1
            self._stop.wait(1.0 / self.rate)

    def _poll_health(self, session: requests.Session) -> None:
        try:
            serves = session.get(f"{self.url}/health", timeout=30).json()["serves"]
            self.served.append(tuple(sorted(serves["retrievers"])))
        except (requests.RequestException, ValueError, KeyError, TypeError) as error:
            self.failures.append(f"/health: {type(error).__name__}: {error}")

    def figures(self) -> dict[str, float | int]:
        every = sorted(x for values in self.latencies.values() for x in values)
        return {"requests": len(every) + len(self.failures), "failed_requests": len(self.failures),
                "p50_ms": round(1000 * statistics.median(every), 1) if every else 0.0,
                "p95_ms": round(1000 * every[int(0.95 * (len(every) - 1))], 1) if every else 0.0,
                "health_polls": len(self.served), "releases_seen": len(self.versions)}  # fmt: skip


def readable_texts(workspace: Path, extra: list[Path]) -> dict[str, str]:
    """Every log and note a user or a local process can read: the workspace's logs, its Prefect
    logs, the `.why` notes of set-aside files, and `extra` (the service's log, ...). The set-aside
    files themselves are the files, moved, not messages."""
    paths = [*workspace.glob("logs/**/*"), *workspace.glob("prefect-logs/**/*"),
             *workspace.glob("incoming/rejected/*.why"), *extra]  # fmt: skip
    return {str(p): p.read_text(encoding="utf-8", errors="replace") for p in paths if p.is_file()}


def secrets_found(texts: dict[str, str], secrets: list[str]) -> list[str]:
    return [f"{secret} in {where}" for where, text in texts.items() for secret in secrets if secret in text]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
