"""SPARQL triples against a real local Oxigraph server, and retry / failure behaviour."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odqa.pipelines.questions.sparql import SparqlError, SparqlTripleSource, aliases_query, triples_query
from odqa.pipelines.questions.triples import JsonlTripleSource, Triple
from tests.questions.conftest import RDFS_LABEL, WDT, ntriples

E = "http://www.wikidata.org/entity/"

FACTS = [
    Triple("Marie Curie", "P19", "Warsaw", "Q7186", "Q270", ("Varsovie", "Warszawa")),
    Triple("Albert Einstein", "P19", "Ulm", "Q937", "Q3012"),
    Triple("Niels Bohr", "P19", "Copenhagen", "Q7085", "Q1748", ("København",)),
    Triple("Ada Lovelace", "P19", "London", "Q7259", "Q84", ("London, UK", "Londinium")),
    Triple("Alan Turing", "P19", "Maida Vale", "Q7251", "Q1136"),
    Triple("Lise Meitner", "P19", "Vienna", "Q57246", "Q1741", ("Wien",)),
    Triple("Enrico Fermi", "P19", "Rome", "Q8753", "Q220", ("Roma", "Eternal City")),
    Triple("Marie Curie", "P20", "Passy", "Q7186", "Q753227"),
    Triple("Albert Einstein", "P20", "Princeton", "Q937", "Q138518", ("Princeton, NJ",)),
    Triple("Niels Bohr", "P20", "Copenhagen", "Q7085", "Q1748", ("København",)),
    Triple("Alan Turing", "P20", "Wilmslow", "Q7251", "Q1018179"),
    Triple("Enrico Fermi", "P20", "Chicago", "Q8753", "Q1297", ("Chi-Town", "Windy City")),
]
# Facts the SPARQL path must ignore: no English subject label, a literal object, a property as object.
NOISE = [
    f'<{E}Q999> <{WDT}P19> <{E}Q270> .',
    f'<{E}Q999> <{RDFS_LABEL}> "Personne"@fr .',
    f'<{E}Q937> <{WDT}P20> "Princeton"@en .',
    f'<{E}Q7251> <{WDT}P19> <{E}P31> .',
    f'<{E}P31> <{RDFS_LABEL}> "instance of"@en .',
]


def _sorted_aliases(t: Triple) -> Triple:
    return Triple(t.subject, t.relation, t.object, t.subject_id, t.object_id, tuple(sorted(t.object_aliases)))


def _jsonl(path: Path, facts: list[Triple]) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for t in facts:
            record = {"subject": t.subject, "relation": t.relation, "object": t.object,
                      "subject_id": t.subject_id, "object_id": t.object_id,
                      "object_aliases": sorted(t.object_aliases)}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


@pytest.fixture
def endpoint(oxigraph) -> str:
    return oxigraph(ntriples(FACTS, NOISE))


@pytest.mark.parametrize("sample", [None, 3, 100])
def test_sparql_gives_the_same_triples_as_jsonl(endpoint: str, tmp_path: Path, sample: int | None) -> None:
    sparql = SparqlTripleSource(endpoint, ["P19", "P20"], sample_per_relation=sample, seed=11, page_size=2,
                                retries=0, timeout=10)
    jsonl = JsonlTripleSource(_jsonl(tmp_path / "t.jsonl", FACTS), ["P19", "P20"], sample_per_relation=sample, seed=11)
    got = sparql.fetch()
    assert got == jsonl.fetch()
    expected_per_relation = {"P19": 7, "P20": 5} if sample in (None, 100) else {"P19": 3, "P20": 3}
    assert {r: sum(t.relation == r for t in got) for r in ("P19", "P20")} == expected_per_relation
    assert {_sorted_aliases(t) for t in FACTS} >= set(got)  # labels and all aliases came through


def test_sample_depends_on_seed_not_on_page_size(endpoint: str) -> None:
    def fetch(seed: int, page_size: int) -> list[Triple]:
        return SparqlTripleSource(endpoint, ["P19"], sample_per_relation=4, seed=seed, page_size=page_size,
                                  retries=0, timeout=10).fetch()

    assert fetch(1, 1) == fetch(1, 1000)
    assert fetch(1, 3) != fetch(2, 3)


def test_429_is_retried_honouring_retry_after(endpoint: str, front_server) -> None:
    front = front_server(lambda n: (429, {"Retry-After": "2"}) if n <= 2 else None, upstream=endpoint)
    waits: list[float] = []
    source = SparqlTripleSource(front.url, ["P20"], retries=3, backoff=0.01, timeout=10,
                                user_agent="odqa-tests/1.0 (test suite)", sleep=waits.append)
    direct = SparqlTripleSource(endpoint, ["P20"], retries=0, timeout=10).fetch()
    assert source.fetch() == direct
    assert waits[:2] == [2.0, 2.0]  # Retry-After wins over the 0.01 s / 0.02 s backoff
    assert all(agent == "odqa-tests/1.0 (test suite)" for agent in front.user_agents)


def test_5xx_is_retried_with_exponential_backoff(endpoint: str, front_server) -> None:
    front = front_server(lambda n: (503, {}) if n <= 3 else None, upstream=endpoint)
    waits: list[float] = []
    got = SparqlTripleSource(front.url, ["P20"], retries=3, backoff=0.5, timeout=10, sleep=waits.append).fetch()
    assert len(got) == 5
    assert waits == [0.5, 1.0, 2.0]


def test_server_that_stays_down_gives_a_clear_error_after_the_retries(front_server) -> None:
    front = front_server(lambda n: (503, {}), upstream=None)
    waits: list[float] = []
    source = SparqlTripleSource(front.url, ["P19"], retries=2, backoff=0.01, timeout=5, sleep=waits.append)
    with pytest.raises(SparqlError, match=r"failed after 3 attempt\(s\): HTTP 503"):
        source.fetch()
    assert front.requests == 3 and len(waits) == 2


def test_unreachable_endpoint_is_retried_then_fails(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    source = SparqlTripleSource(f"http://127.0.0.1:{port}/sparql", ["P19"], retries=1, backoff=0.01, timeout=5,
                                sleep=lambda s: None)
    with pytest.raises(SparqlError, match="connection failed"):
        source.fetch()
    assert source.requests == 2


def test_failure_in_a_later_relation_returns_nothing(endpoint: str, front_server) -> None:
    first = SparqlTripleSource(endpoint, ["P19"], page_size=100, retries=0, timeout=10)
    first.fetch()
    budget = first.requests  # requests needed for P19; every later one fails
    front = front_server(lambda n: (502, {}) if n > budget else None, upstream=endpoint)
    source = SparqlTripleSource(front.url, ["P19", "P20"], page_size=100, retries=1, backoff=0.0, timeout=10)
    result = None
    with pytest.raises(SparqlError, match="HTTP 502"):
        result = source.fetch()
    assert result is None


def test_bad_request_is_not_retried(front_server) -> None:
    front = front_server(lambda n: (400, {}), upstream=None)
    source = SparqlTripleSource(front.url, ["P19"], retries=5, backoff=0.0, timeout=5)
    with pytest.raises(SparqlError, match="not retriable"):
        source.fetch()
    assert front.requests == 1


@pytest.mark.parametrize("relation", ["P19 } DROP ALL {", "wdt:P19", "p19", "Q5", "", "P1.5"])
def test_invalid_relation_id_is_refused(relation: str) -> None:
    with pytest.raises(ValueError, match="invalid relation id"):
        SparqlTripleSource("http://127.0.0.1:9/sparql", [relation])
    with pytest.raises(ValueError, match="invalid relation id"):
        triples_query(relation, 0, 10, 0)


def test_invalid_entity_id_never_reaches_a_query() -> None:
    with pytest.raises(ValueError, match="invalid entity id"):
        aliases_query(["Q1", "Q2> . ?x ?y ?z"], 10, 0)
    assert "wd:Q1 wd:Q2" in aliases_query(["Q1", "Q2"], 10, 0)
