"""Triples from JSON Lines and T-REx files, and the shared deterministic per-relation sample."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from odqa.pipelines.questions import jsonstream
from odqa.pipelines.questions.jsonstream import JsonFormatError, iter_json_array
from odqa.pipelines.questions.triples import (
    JsonlTripleSource,
    TrexTripleSource,
    Triple,
    TripleFormatError,
    read_triples_jsonl,
    sample_key,
    sample_triples,
)


def _facts(n: int, relation: str = "P19") -> list[Triple]:
    return [Triple(f"Person {i}", relation, f"City {i % 7}", f"Q{1000 + i}", f"Q{i % 7 + 1}") for i in range(n)]


def test_bounded_sample_equals_the_smallest_keys() -> None:
    facts = _facts(500)
    shuffled = facts * 2  # every fact twice: duplicates must not take two places
    random.Random(3).shuffle(shuffled)
    got = sample_triples(shuffled, ["P19"], sample_per_relation=17, seed=5)
    expected = sorted(facts, key=lambda t: (sample_key(5, t.subject_id, t.object_id), t.subject_id, t.object_id))[:17]
    assert got == expected


def test_sample_keeps_relation_order_and_filters_relations() -> None:
    facts = _facts(20, "P20") + _facts(20, "P19") + _facts(5, "P17")
    got = sample_triples(facts, ["P20", "P19"], sample_per_relation=3, seed=0)
    assert [t.relation for t in got] == ["P20"] * 3 + ["P19"] * 3
    everything = sample_triples(facts, None, None, seed=0)
    assert [t.relation for t in everything] == ["P17"] * 5 + ["P19"] * 20 + ["P20"] * 20


def test_jsonl_source_reads_all_fields(tmp_path: Path) -> None:
    path = tmp_path / "triples.jsonl"
    path.write_text(
        json.dumps({"subject": "Marie Curie", "relation": "P19", "object": "Warsaw", "subject_id": "Q7186",
                    "object_id": "Q270", "object_aliases": ["Warszawa"]}) + "\n\n"
        + json.dumps({"subject": "Homer", "relation": "P19", "object": "Smyrna"}) + "\n",
        encoding="utf-8",
    )
    got = JsonlTripleSource(path).fetch()
    assert Triple("Marie Curie", "P19", "Warsaw", "Q7186", "Q270", ("Warszawa",)) in got
    assert Triple("Homer", "P19", "Smyrna") in got and len(got) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"subject": "A", "relation": "P19", "object": "B"', "not valid JSON"),
        ('{"subject": "A", "relation": "born in", "object": "B"}', "relation must be a Wikidata property id"),
        ('{"subject": "", "relation": "P19", "object": "B"}', "subject must be a non-empty string"),
        ('{"subject": "A", "relation": "P19", "object": "B", "subject_id": "42"}', "subject_id must be a Wikidata item id"),
        ('{"subject": "A", "relation": "P19", "object": "B", "object_aliases": "C"}', "object_aliases must be a list"),
        ('["A", "P19", "B"]', "expected a JSON object"),
    ],
)
def test_malformed_jsonl_line_names_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"subject": "A", "relation": "P19", "object": "B"})
    path.write_text(f"{good}\n{good}\n{line}\n", encoding="utf-8")
    with pytest.raises(TripleFormatError, match=rf"bad\.jsonl:3: .*{message}"):
        list(read_triples_jsonl(path))


def _trex_triple(s: str, s_label: str, p: str, o: str, o_label: str) -> dict:
    return {
        "subject": {"uri": f"http://www.wikidata.org/entity/{s}", "surfaceform": s_label, "boundaries": [0, 5]},
        "predicate": {"uri": f"http://www.wikidata.org/prop/direct/{p}", "surfaceform": "born", "boundaries": None},
        "object": {"uri": o if o.startswith("http") else f"http://www.wikidata.org/entity/{o}",
                   "surfaceform": o_label, "boundaries": [10, 15]},
        "sentence_id": 0,
        "annotator": "Wikidata_Spo_Linker",
    }


def _trex_doc(docid: str, triples: list[dict]) -> dict:
    return {"docid": docid, "uri": f"http://www.wikidata.org/entity/{docid}", "title": docid,
            "text": "Some text " * 50, "entities": [], "triples": triples, "sentences_boundaries": [[0, 10]]}


def test_trex_files_are_streamed_deduplicated_and_filtered(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(jsonstream, "_CHUNK", 97)  # force documents across many chunk boundaries
    folder = tmp_path / "trex"
    folder.mkdir()
    doc1 = _trex_doc("Q7186", [
        _trex_triple("Q7186", "Marie Curie", "P19", "Q270", "Warsaw"),
        _trex_triple("Q7186", "Marie Curie", "P19", "Q270", "Warsaw"),  # same fact, second sentence
        _trex_triple("Q7186", "Marie Curie", "P569", "http://www.w3.org/2001/XMLSchema#dateTime", "1867"),
    ])
    doc2 = _trex_doc("Q937", [
        _trex_triple("Q937", "Einstein", "P19", "Q3012", "Ulm"),
        _trex_triple("Q937", "Einstein", "P20", "Q138518", "Princeton"),
        {"subject": {"uri": "http://www.wikidata.org/entity/Q937", "surfaceform": "Einstein"},
         "predicate": {"uri": "http://www.w3.org/2000/01/rdf-schema#label", "surfaceform": "x"},
         "object": {"uri": "http://www.wikidata.org/entity/Q1", "surfaceform": "y"}},
    ])
    (folder / "re-nlg_0-10000.json").write_text(json.dumps([doc1]), encoding="utf-8")
    (folder / "re-nlg_10000-20000.json").write_text(json.dumps([doc2], indent=2), encoding="utf-8")
    source = TrexTripleSource(folder, ["P19", "P20"])
    got = source.fetch()
    assert [t for t in got if t.relation == "P19"] == sorted(
        [Triple("Marie Curie", "P19", "Warsaw", "Q7186", "Q270"), Triple("Einstein", "P19", "Ulm", "Q937", "Q3012")],
        key=lambda t: (sample_key(0, t.subject_id, t.object_id), t.subject_id, t.object_id),
    )
    assert [t for t in got if t.relation == "P20"] == [Triple("Einstein", "P20", "Princeton", "Q937", "Q138518")]
    everything = TrexTripleSource(folder).fetch()
    assert Triple("Marie Curie", "P569", "1867", "Q7186", None) in everything
    assert source.skipped["predicate not a Wikidata property"] == 1


def test_trex_malformed_document_names_file_and_element(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    good = json.dumps(_trex_doc("Q1", [_trex_triple("Q1", "A", "P19", "Q2", "B")]))
    path.write_text(f"[{good}, {good}, {{\"docid\": \"Q3\", \"triples\": [}}]", encoding="utf-8")
    with pytest.raises(TripleFormatError, match=r"broken\.json: element 2 at offset \d+"):
        TrexTripleSource(path).fetch()
    path.write_text(f"[{good}, {{\"docid\": \"Q3\", \"triples\": [{{\"subject\": 1}}]}}]", encoding="utf-8")
    with pytest.raises(TripleFormatError, match=r"broken\.json: document 1: a triple needs subject"):
        TrexTripleSource(path).fetch()


@pytest.mark.parametrize("chunk", [1, 2, 7, 1 << 20])
def test_json_array_reader_handles_any_chunking(tmp_path: Path, monkeypatch, chunk: int) -> None:
    monkeypatch.setattr(jsonstream, "_CHUNK", chunk)
    values = [{"a": [1, 2, {"b": "x, ]"}]}, 12345, "s", None, [], 1.5e10, True, {"é": "ü"}]
    path = tmp_path / "values.json"
    path.write_text(" [\n" + ",\n ".join(json.dumps(v, ensure_ascii=False) for v in values) + " ]\n", encoding="utf-8")
    assert list(iter_json_array(path)) == values
    path.write_text("[ ]", encoding="utf-8")
    assert list(iter_json_array(path)) == []
    path.write_text('{"not": "an array"}', encoding="utf-8")
    with pytest.raises(JsonFormatError, match="expected a JSON array"):
        list(iter_json_array(path))
    path.write_text("[1, 2 3]", encoding="utf-8")
    with pytest.raises(JsonFormatError, match="expected ',' or ']' after element 1"):
        list(iter_json_array(path))
    path.write_text("[1, 2", encoding="utf-8")
    with pytest.raises(JsonFormatError, match="unexpected end of file"):
        list(iter_json_array(path))
