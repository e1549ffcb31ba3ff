"""Template questions reproduce the published EntityQuestions dev set byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odqa.pipelines.questions.templates import (
    TemplateError,
    base_relation,
    load_templates,
    make_question,
    recover_subject,
)
from tests.conftest import shared_data


def test_reproduces_every_published_entityquestions_dev_question() -> None:
    templates = load_templates(shared_data("entityquestions", "relation_query_templates.json"))
    files = sorted(shared_data("entityquestions", "dev").glob("P*.dev.json"))
    assert len(files) == 24
    total = 0
    for file in files:
        relation = file.name.split(".")[0]
        published = json.loads(file.read_bytes().decode("utf-8"))
        for record in published:
            question = record["question"]
            subject = recover_subject(templates[relation], question)
            assert subject is not None, f"{file.name}: {question!r} does not fit template {templates[relation]!r}"
            regenerated = make_question(templates[relation], subject)
            assert regenerated.encode("utf-8") == question.encode("utf-8")
            total += 1
    assert total > 20_000  # every question of all 24 relations, none skipped


def test_similar_paraphrase_templates_round_trip_published_subjects() -> None:
    templates = load_templates(shared_data("entityquestions", "relation_query_templates.json"))
    similar = {key: t for key, t in templates.items() if key.endswith("_similar")}
    assert set(similar) == {"P19_similar", "P159_similar", "P170_similar"}
    for key, template in similar.items():
        relation = base_relation(key)
        published = json.loads(shared_data("entityquestions", "dev", f"{relation}.dev.json").read_text("utf-8"))
        for record in published:
            subject = recover_subject(templates[relation], record["question"])
            paraphrase = make_question(template, subject)
            assert paraphrase != record["question"]
            assert recover_subject(template, paraphrase) == subject


def test_make_question_changes_nothing_but_the_slot() -> None:
    assert make_question("Where was [X] born?", "Dezső Ránki") == "Where was Dezső Ránki born?"
    assert make_question("Who is [X]'s child?", "  O'Brien (singer) ") == "Who is   O'Brien (singer) 's child?"
    assert make_question("What is [X] famous for?", "[X] \\1 $&") == "What is [X] \\1 $& famous for?"
    assert recover_subject("Where was [X] born?", "Where is Paris?") is None


def test_bad_templates_file_is_refused_with_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "templates.json"
    path.write_text(json.dumps({"P19": "Where was [X] born?", "P20": "Where did he die?"}), encoding="utf-8")
    with pytest.raises(TemplateError, match=r"templates\.json: template of P20 must be a string with exactly one \[X\]"):
        load_templates(path)
    path.write_text(json.dumps({"born in": "Where was [X] born?"}), encoding="utf-8")
    with pytest.raises(TemplateError, match="key 'born in' is not a relation id"):
        load_templates(path)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(TemplateError, match="not valid JSON"):
        load_templates(path)
    with pytest.raises(TemplateError):
        make_question("[X] and [X]", "a")
