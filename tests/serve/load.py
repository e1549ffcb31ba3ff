"""A bounded load generator for the service, and the consistency check of what it got back.

Each release of the load tests differs from the previous one by marker passages (made-up names
no sample passage mentions), and each marker has a question that finds it. So an answer that
names index version v must contain exactly the markers v has among the passages it is about:
never a marker of a later release (a half-switched index), always its own (a complete one)."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

MARKERS = {
    "marker-1": ("Zorblax lantern festival", "The Zorblax lantern festival of Quenby is held every spring in the old "
                                             "town square, with paper lanterns."),
    "marker-2": ("Vantrope glass bridge", "The Vantrope glass bridge of Quenby was rebuilt by local glassmakers in "
                                          "1999 after a storm."),
    "marker-3": ("Morwick salt tower", "The Morwick salt tower of Quenby was carved from a single block of rock salt "
                                       "by miners."),
}  # fmt: skip
QUESTIONS = {  # question -> the marker it must return from any release that has it
    "When is the Zorblax lantern festival of Quenby held?": "marker-1",
    "Who rebuilt the Vantrope glass bridge of Quenby?": "marker-2",
    "What was the Morwick salt tower of Quenby carved from?": "marker-3",
    "Where was Marie Curie born?": None,
}
RETRIEVERS = ("dense", "bm25")
K = 5
# Malformed requests a load may mix in (issue 28): each must get a 4xx {"error": ...} of its own
# and never disturb the valid requests it shares the service (and its micro-batches) with.
MALFORMED = (
    b'{"question": "\\ud800 amazon", "retriever": "dense"}',  # a lone surrogate: the question encoder's bane
    b'{"question": "\\udfff Quenby", "retriever": "bm25"}',
    b'{"question": "Where was Marie Curie born?", "k": "5"}',
    b'{"question": "Where was Marie Curie born?", "k": true}',
    b'{"question": "who\\u0000 is", "retriever": "bm25"}',
    b'{"question": "caf\xe9 au lait"}',  # not UTF-8
    b'{"question": "Where was',  # truncated JSON
    b'{"questions": ["Where was Marie Curie born?", 7]}',
)


def write_delta(path: Path, *marker_ids: str) -> Path:
    """A DPR-TSV passages delta with the given marker passages."""
    lines = "".join(f"{mid}\t{MARKERS[mid][1]}\t{MARKERS[mid][0]}\n" for mid in marker_ids)
    path.write_text("id\ttext\ttitle\n" + lines, encoding="utf-8")
    return path


@dataclass
class Answer:
    concurrency: int
    question: str
    retriever: str
    version: str | None = None
    passage_ids: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    malformed: bool = False  # one of MALFORMED: answered right when refused with a 4xx {"error": ...}


class LoadGenerator:
    """Runs phases of `concurrency` client threads against POST /search and records every answer.
    `in_flight` maps each client thread to when its current request started (for a watchdog).
    With `malformed_every` n, every n-th request of a client is one of MALFORMED."""

    def __init__(self, url: str, timeout_s: float = 60.0, malformed_every: int = 0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.malformed_every = malformed_every
        self.answers: list[Answer] = []
        self.in_flight: dict[int, float] = {}
        self._lock = threading.Lock()

    def _refused(self, session: requests.Session, body: bytes, answer: Answer) -> None:
        """Send a malformed body; anything but a 4xx with the service's error shape is an error."""
        reply = session.post(f"{self.url}/search", data=body, headers={"Content-Type": "application/json"},
                             timeout=self.timeout_s)  # fmt: skip
        try:
            shape = set(reply.json())
        except ValueError:
            shape = set()
        if not 400 <= reply.status_code < 500 or shape != {"error"}:
            answer.error = f"malformed {body[:40]!r} got HTTP {reply.status_code}: {reply.text[:200]}"

    def _valid(self, session: requests.Session, question: str, retriever: str, answer: Answer) -> None:
        reply = session.post(f"{self.url}/search", json={"question": question, "k": K, "retriever": retriever},
                             timeout=self.timeout_s)  # fmt: skip
        body = reply.json()
        if reply.status_code != 200:
            answer.error = f"HTTP {reply.status_code}: {body}"
        else:
            answer.version = body["version"]
            answer.passage_ids = [h["passage_id"] for h in body["results"][0]["hits"]]
            if any(h["text"] is None for h in body["results"][0]["hits"]):
                answer.error = "a hit without passage text"

    def _client(self, concurrency: int, until: float, offset: int) -> None:
        cases = itertools.islice(itertools.cycle([(q, r) for q in QUESTIONS for r in RETRIEVERS]), offset, None)
        bad = itertools.islice(itertools.cycle(MALFORMED), offset, None)
        with requests.Session() as session:
            for number, (question, retriever) in enumerate(cases, start=offset):
                if time.monotonic() >= until:
                    return
                answer = Answer(concurrency, question, retriever)
                started = self.in_flight[threading.get_ident()] = time.monotonic()
                answer.malformed = bool(self.malformed_every) and number % self.malformed_every == 0
                try:
                    if answer.malformed:
                        self._refused(session, next(bad), answer)
                    else:
                        self._valid(session, question, retriever, answer)
                except (requests.RequestException, ValueError) as error:
                    answer.error = f"{type(error).__name__}: {error}"
                answer.seconds = time.monotonic() - started
                del self.in_flight[threading.get_ident()]
                with self._lock:
                    self.answers.append(answer)

    def phase(self, concurrency: int, seconds: float) -> None:
        until = time.monotonic() + seconds
        threads = [threading.Thread(target=self._client, args=(concurrency, until, i), daemon=True)
                   for i in range(concurrency)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=seconds + self.timeout_s + 60)

    def cycle(self, seconds: float, levels: tuple[int, ...] = (1, 8, 32)) -> None:
        for level in levels:
            self.phase(level, seconds)


def problems(answers: list[Answer], markers_of: dict[str, set[str]]) -> list[str]:
    """Every error, empty result and answer inconsistent with the version it names."""
    found = []
    for a in answers:
        where = f"c={a.concurrency} {a.retriever} {a.question!r} v={a.version}"
        if a.error:
            found.append(f"{where}: {a.error}")
        elif a.malformed:
            continue
        elif not a.passage_ids:
            found.append(f"{where}: empty result")
        elif a.version not in markers_of:
            found.append(f"{where}: unknown version")
        else:
            has = markers_of[a.version]
            extra = {pid for pid in a.passage_ids if pid.startswith("marker-")} - has
            if extra:
                found.append(f"{where}: markers {sorted(extra)} are not in that version")
            wanted = QUESTIONS[a.question]
            if wanted in has and wanted not in a.passage_ids:
                found.append(f"{where}: {wanted} of that version is missing from {a.passage_ids}")
    return found


def assert_no_problems(answers: list[Answer], markers_of: dict[str, set[str]], log: str) -> None:
    """No bad answer at all: no error, no timeout, no empty or inconsistent result (with the
    service's log, and its thread dump when a request timed out)."""
    found = problems(answers, markers_of)
    assert not found, f"{len(found)} bad answers of {len(answers)}, e.g. {found[:5]}\n{log}"
