"""Triples from a SPARQL endpoint (Wikidata's public one by default) through SPARQLWrapper.

For each relation the endpoint returns (subject, object) pairs whose subject and object both
have an English `rdfs:label`, ordered by the same sample key as the local sources
(`triples.sample_key`: MD5 of "seed|Qsubject|Qobject", computed by SPARQL's own MD5), and
paged with LIMIT/OFFSET until the per-relation sample is full. Because the order is a total
order on the data, pages never overlap or skip, and the sample is the same one a JSON Lines dump
of the same facts gives. English `skos:altLabel` aliases of the sampled objects are fetched
afterwards in small VALUES batches.

Safety and etiquette (Wikidata's query service policy):
- relation ids must match `^P\\d+$` and entity ids `^Q\\d+$` before they enter a query; nothing
  else from the caller is ever put into query text (the seed is an int);
- every request carries a descriptive User-Agent;
- HTTP 429 and 5xx, timeouts and connection errors are retried with exponential backoff,
  waiting at least as long as the server's Retry-After header asks;
- a call returns all its triples or raises `SparqlError`: nothing partial comes back.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import socket
import time
import urllib.error
from collections.abc import Callable, Sequence
from typing import Any

from SPARQLWrapper import JSON, SPARQLWrapper
from SPARQLWrapper.SPARQLExceptions import EndPointInternalError, SPARQLWrapperException

from .triples import (
    ENTITY_ID,
    WIKIDATA_ENTITY,
    Triple,
    check_entity_id,
    check_relation_id,
)

WIKIDATA_ENDPOINT = "https://query.wikidata.org/sparql"
DEFAULT_USER_AGENT = (
    "odqa/0.1 (open-domain QA dataset builder; T-REx-style template questions) SPARQLWrapper"
)
_PREFIXES = (
    "PREFIX wd: <http://www.wikidata.org/entity/>\n"
    "PREFIX wdt: <http://www.wikidata.org/prop/direct/>\n"
    "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>\n"
    "PREFIX skos: <http://www.w3.org/2004/02/skos/core#>\n"
)
_ALIAS_BATCH = 100  # object ids per alias query: keeps GET URLs short


class SparqlError(RuntimeError):
    """A SPARQL request that failed for good (after retries, or a non-retriable error)."""


def _retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a Retry-After header: either a number or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _classify(exc: BaseException) -> tuple[bool, float | None, str]:
    """(retriable?, Retry-After seconds, description) for an exception raised by a request."""
    if isinstance(exc, urllib.error.HTTPError):
        retry_after = _retry_after_seconds(exc.headers.get("Retry-After") if exc.headers else None)
        retriable = exc.code == 429 or exc.code >= 500
        return retriable, retry_after, f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, EndPointInternalError):
        return True, None, "HTTP 500 (endpoint internal error)"
    if isinstance(exc, SPARQLWrapperException):  # 400 bad query, 401, 404, 414: retrying cannot help
        return False, None, f"{type(exc).__name__}: {str(exc)[:300]}"
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return True, None, "timed out"
    if isinstance(exc, urllib.error.URLError):
        return True, None, f"connection failed ({exc.reason})"
    if isinstance(exc, (http.client.HTTPException, ConnectionError)):
        return True, None, f"connection broken ({type(exc).__name__}: {exc})"
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
        return False, None, "the endpoint did not return SPARQL JSON results"
    return False, None, f"{type(exc).__name__}: {exc}"


def triples_query(relation: str, seed: int, limit: int, offset: int) -> str:
    """The paged, sample-ordered query for one relation (validated id, int-only parameters)."""
    relation = check_relation_id(relation)
    seed, limit, offset = int(seed), int(limit), int(offset)
    return (
        _PREFIXES
        + "SELECT ?s ?o ?sLabel ?oLabel ?key WHERE {\n"
        + f"  ?s wdt:{relation} ?o .\n"
        + "  ?s rdfs:label ?sLabel . FILTER(LANG(?sLabel) = \"en\")\n"
        + "  ?o rdfs:label ?oLabel . FILTER(LANG(?oLabel) = \"en\")\n"
        + f"  FILTER(STRSTARTS(STR(?s), \"{WIKIDATA_ENTITY}Q\") && STRSTARTS(STR(?o), \"{WIKIDATA_ENTITY}Q\"))\n"
        + f"  BIND(MD5(CONCAT(\"{seed}|\", STRAFTER(STR(?s), \"{WIKIDATA_ENTITY}\"), \"|\","
        + f" STRAFTER(STR(?o), \"{WIKIDATA_ENTITY}\"))) AS ?key)\n"
        + "}\n"
        + "ORDER BY ?key ?s ?o ?sLabel ?oLabel\n"
        + f"LIMIT {limit} OFFSET {offset}\n"
    )


def aliases_query(object_ids: Sequence[str], limit: int, offset: int) -> str:
    """English aliases of the given items (ids validated), in a stable order for paging."""
    values = " ".join(f"wd:{check_entity_id(q)}" for q in object_ids)
    return (
        _PREFIXES
        + "SELECT ?o ?alias WHERE {\n"
        + f"  VALUES ?o {{ {values} }}\n"
        + "  ?o skos:altLabel ?alias . FILTER(LANG(?alias) = \"en\")\n"
        + "}\n"
        + "ORDER BY ?o ?alias\n"
        + f"LIMIT {int(limit)} OFFSET {int(offset)}\n"
    )


class SparqlTripleSource:
    """Per-relation deterministic samples of English-labelled facts from a SPARQL endpoint."""

    def __init__(
        self,
        endpoint_url: str = WIKIDATA_ENDPOINT,
        relations: Sequence[str] = (),
        sample_per_relation: int | None = None,
        seed: int = 0,
        page_size: int = 1000,
        retries: int = 5,
        backoff: float = 1.0,
        timeout: float = 120.0,
        user_agent: str = DEFAULT_USER_AGENT,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not endpoint_url.startswith(("http://", "https://")):
            raise ValueError(f"SPARQL endpoint must be an http(s) URL, got {endpoint_url!r}")
        if page_size < 1 or retries < 0 or backoff < 0 or timeout <= 0:
            raise ValueError("page_size must be >= 1, retries >= 0, backoff >= 0 and timeout > 0")
        if sample_per_relation is not None and sample_per_relation < 0:
            raise ValueError(f"sample_per_relation must be >= 0, got {sample_per_relation}")
        if not user_agent.strip():
            raise ValueError("a descriptive User-Agent is required by Wikidata's query service policy")
        self.endpoint_url = endpoint_url
        self.relations = [check_relation_id(r) for r in relations]
        self.sample_per_relation = sample_per_relation
        self.seed = int(seed)
        self.page_size = page_size
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self.user_agent = user_agent
        self._sleep = sleep
        self.requests = 0  # HTTP requests sent, retries included (for reports and tests)

    def _select(self, query: str) -> list[dict[str, Any]]:
        """Run one SELECT with retries; the result bindings, or SparqlError."""
        attempt = 0
        while True:
            client = SPARQLWrapper(self.endpoint_url, agent=self.user_agent)
            client.setQuery(query)
            client.setReturnFormat(JSON)
            client.setTimeout(max(1, int(self.timeout)))
            self.requests += 1
            try:
                result = client.queryAndConvert()
                if not isinstance(result, dict) or "results" not in result:
                    raise json.JSONDecodeError("no 'results' member", "", 0)
                return result["results"]["bindings"]
            except Exception as exc:  # classified below: retried, or turned into SparqlError
                retriable, retry_after, what = _classify(exc)
                if not retriable or attempt >= self.retries:
                    tries = f"after {attempt + 1} attempt(s)" if retriable else "(not retriable)"
                    raise SparqlError(f"SPARQL request to {self.endpoint_url} failed {tries}: {what}") from exc
                delay = self.backoff * (2**attempt)
                if retry_after is not None:
                    delay = max(delay, retry_after)
                self._sleep(delay)
                attempt += 1

    def fetch_relation(self, relation: str) -> list[Triple]:
        """The relation's sample (all facts when sample_per_relation is None), with aliases."""
        relation = check_relation_id(relation)
        want = self.sample_per_relation
        pairs: dict[tuple[str, str], tuple[str, str]] = {}
        offset = 0
        while want is None or len(pairs) < want:
            limit = self.page_size if want is None else min(self.page_size, want - len(pairs))
            rows = self._select(triples_query(relation, self.seed, limit, offset))
            for row in rows:
                s_id = row["s"]["value"][len(WIKIDATA_ENTITY):]
                o_id = row["o"]["value"][len(WIKIDATA_ENTITY):]
                if not (ENTITY_ID.match(s_id) and ENTITY_ID.match(o_id)):
                    continue
                pairs.setdefault((s_id, o_id), (row["sLabel"]["value"], row["oLabel"]["value"]))
            if len(rows) < limit:
                break
            offset += len(rows)
        if want is not None:
            pairs = dict(list(pairs.items())[:want])
        aliases = self._aliases(sorted({o for _, o in pairs}))
        return [
            Triple(
                subject=s_label,
                relation=relation,
                object=o_label,
                subject_id=s_id,
                object_id=o_id,
                object_aliases=tuple(aliases.get(o_id, ())),
            )
            for (s_id, o_id), (s_label, o_label) in pairs.items()
        ]

    def _aliases(self, object_ids: list[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for start in range(0, len(object_ids), _ALIAS_BATCH):
            batch = object_ids[start : start + _ALIAS_BATCH]
            offset = 0
            while True:
                rows = self._select(aliases_query(batch, self.page_size, offset))
                for row in rows:
                    found.setdefault(row["o"]["value"][len(WIKIDATA_ENTITY):], []).append(row["alias"]["value"])
                if len(rows) < self.page_size:
                    break
                offset += len(rows)
        return found

    def fetch(self) -> list[Triple]:
        """All relations' samples, in relation order; any failure raises and returns nothing."""
        return [t for relation in self.relations for t in self.fetch_relation(relation)]
