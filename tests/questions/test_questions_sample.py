"""The bundled sample: Wikidata-shaped RDF served by Oxigraph, its JSON Lines twin, PAQ and QA files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from odqa.flows.plumbing.oxigraph import local_sparql_endpoint
from odqa.flows.plumbing.sample_data import SAMPLE_DIR, SAMPLE_DUMP
from odqa.pipelines.questions.imports import import_questions
from odqa.pipelines.questions.paq import PaqConfig, sample_paq
from odqa.pipelines.questions.positives import find_positives
from odqa.pipelines.questions.sparql import SparqlTripleSource
from odqa.pipelines.questions.splits import SplitConfig, single_split, thesis_splits
from odqa.pipelines.questions.templates import load_templates
from odqa.pipelines.questions.triples import JsonlTripleSource

WIKIDATA = SAMPLE_DIR / "wikidata"


def _sample(*parts: str) -> Path:
    path = SAMPLE_DIR.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"bundled sample file missing: {path}")
    return path


@pytest.fixture(scope="module")
def sample_relations() -> list[str]:
    lines = _sample("wikidata", "triples.jsonl").read_text("utf-8").splitlines()
    return sorted({json.loads(line)["relation"] for line in lines if line.strip()}, key=lambda r: int(r[1:]))


@pytest.fixture(scope="module")
def sample_endpoint() -> str:
    rdf = sorted(p for p in _sample("wikidata").iterdir() if p.suffix in (".nt", ".ttl"))
    with local_sparql_endpoint(rdf) as url:
        yield url


@pytest.mark.parametrize("per_relation", [None, 2])
def test_sample_rdf_over_sparql_equals_its_jsonl(sample_endpoint: str, sample_relations: list[str],
                                                 per_relation: int | None) -> None:
    via_sparql = SparqlTripleSource(sample_endpoint, sample_relations, sample_per_relation=per_relation, seed=5,
                                    page_size=50, retries=0, timeout=20).fetch()
    via_jsonl = JsonlTripleSource(WIKIDATA / "triples.jsonl", sample_relations, per_relation, seed=5).fetch()

    def canonical(triples):  # alias order is not part of the data
        return [(t.subject, t.relation, t.object, t.subject_id, t.object_id, tuple(sorted(t.object_aliases)))
                for t in triples]

    assert canonical(via_sparql) == canonical(via_jsonl)
    assert len(via_sparql) > 0


def _sample_corpus() -> tuple[pa.Table, pa.Table]:
    from odqa.pipelines.wikipedia.ingest import IngestOptions, iter_chunks

    if not SAMPLE_DUMP.exists():
        pytest.skip(f"bundled sample dump missing: {SAMPLE_DUMP}")
    chunks = list(iter_chunks(SAMPLE_DUMP, IngestOptions(workers=1)))
    articles = pa.concat_tables([c.articles for c in chunks])
    return pa.concat_tables([c.passages for c in chunks]), articles.filter(articles.column("is_redirect"))


def test_most_sample_questions_have_a_positive_in_the_sample_articles() -> None:
    templates = load_templates(_sample("wikidata", "relation_query_templates.json"))
    facts = JsonlTripleSource(WIKIDATA / "triples.jsonl").fetch()
    questions = single_split(facts, templates, "trex-sample", "all").questions
    passages, redirects = _sample_corpus()
    result = find_positives(questions, passages, redirects)
    total = sum(r["questions"] for r in result.report)
    with_positive = sum(r["with_positive"] for r in result.report)
    assert total == len(facts) and with_positive >= 0.9 * total
    passage_titles = dict(zip(passages.column("passage_id").to_pylist(), passages.column("title").to_pylist(),
                              strict=True))
    for row in result.questions.to_pylist():
        assert all(pid in passage_titles for pid in row["positive_ids"])


def test_sample_thesis_splits_are_deterministic() -> None:
    templates = load_templates(_sample("wikidata", "relation_query_templates.json"))
    facts = JsonlTripleSource(WIKIDATA / "triples.jsonl").fetch()
    config = SplitConfig(size_per_relation=None, analysis_per_relation=2, seed=1)
    first = thesis_splits(facts, templates, "trex-sample", config).questions
    assert first.equals(thesis_splits(facts, templates, "trex-sample", config).questions)
    splits = Counter(first.column("split").to_pylist())
    assert splits["train"] > 0 and splits["test_unseen"] > 0


def test_sample_paq_file(tmp_path: Path) -> None:
    path = _sample("paq", "paq-sample.metadata.jsonl")
    by_passage: dict[str, set[str]] = {}
    for line in path.read_text("utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            for span in record["answers"]:
                by_passage.setdefault(str(span["passage_id"]), set()).add(record["question"])
    eligible = {p for p, qs in by_passage.items() if len(qs) >= 3}
    result = sample_paq(path, tmp_path, config=PaqConfig(passages=1000))
    rows = result.questions.to_pylist()
    assert {row["positive_ids"][0] for row in rows} == eligible and len(rows) == len(eligible)
    assert all(row["question"] in by_passage[row["positive_ids"][0]] for row in rows)
    n = len(rows)
    assert Counter(row["split"] for row in rows) == {
        s: c for s, c in {"train": n * 7 // 10, "dev": n * 15 // 100, "test": n - n * 7 // 10 - n * 15 // 100}.items() if c
    }


@pytest.mark.parametrize(("fmt", "name"), [("nq-open", "nq-sample.jsonl"), ("dpr-qas", "dpr-qas-sample.tsv")])
def test_sample_qa_files_import(fmt: str, name: str) -> None:
    path = _sample("qa", name)
    lines = [line for line in path.read_text("utf-8").splitlines() if line.strip()]
    questions = import_questions(fmt, path, "nq-sample", "test").questions.to_table().to_pylist()
    assert len(questions) == len(lines)
    assert all(q["question"] and q["answers"] and all(isinstance(a, str) for a in q["answers"]) for q in questions)
