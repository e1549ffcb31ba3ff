"""Each import format round-trips a sample in its published shape; bad records name their line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odqa.pipelines.questions.imports import (
    ImportFormatError,
    dedupe_passages,
    import_questions,
)
from odqa.pipelines.questions.rows import stable_id
from odqa.pipelines.questions.specs import DatasetSpec, parse_dataset_specs
from tests.conftest import shared_data

DPR_JSON = [
    {
        "dataset": "nq_train_psg",
        "question": "big little lies season 2 how many episodes",
        "answers": ["seven"],
        "positive_ctxs": [
            {"title": "Big Little Lies (TV series)", "text": "series garnered several accolades. ... seven episodes",
             "score": 1000, "title_score": 1, "passage_id": "18768923"},
        ],
        "negative_ctxs": [
            {"title": "Cormac McCarthy", "text": "chores of the house, Lee was asked by Cormac", "score": 0,
             "title_score": 0, "passage_id": "2145653"},
        ],
        "hard_negative_ctxs": [
            {"title": "Little People, Big World", "text": "final minutes of the season two-A finale", "score": 13.39,
             "title_score": 0, "passage_id": "16135596"},
            {"title": "Big Little Lies (TV series)", "text": "series garnered several accolades. ... seven episodes",
             "score": 12.0, "title_score": 0, "passage_id": "18768923"},
        ],
    },
    {
        "dataset": "nq_train_psg",
        "question": "who sang waiting for a girl like you",
        "answers": ["Foreigner", "Foreigner"],
        "positive_ctxs": [{"title": "Waiting for a Girl Like You", "text": "a 1981 power ballad by Foreigner"}],
        "negative_ctxs": [],
        "hard_negative_ctxs": [],
    },
]


def _tables(imported):
    return (
        imported.questions.to_table().to_pylist(),
        imported.passages.to_table().to_pylist() if imported.passages else None,
        imported.qrels.to_table().to_pylist() if imported.qrels else None,
    )


def test_dpr_json(tmp_path: Path) -> None:
    path = tmp_path / "biencoder-nq-dev.json"
    path.write_text(json.dumps(DPR_JSON, indent=2), encoding="utf-8")
    questions, passages, qrels = _tables(import_questions("dpr-json", path, "nq", "dev"))
    assert qrels is None
    assert [q["question"] for q in questions] == [r["question"] for r in DPR_JSON]
    assert questions[0]["answers"] == ["seven"] and questions[1]["answers"] == ["Foreigner"]
    assert questions[0]["positive_ids"] == ["18768923"]
    assert questions[0]["hard_negative_ids"] == ["16135596", "18768923"]
    assert questions[0]["question_id"] == stable_id("nq", "dev", "0")
    assert questions[0]["dataset"] == "nq" and questions[0]["split"] == "dev"
    synthetic = questions[1]["positive_ids"][0]
    assert synthetic.startswith("dpr:")  # a context without an id gets a stable content id
    assert [p["passage_id"] for p in passages] == ["18768923", "2145653", "16135596", "18768923", synthetic]
    assert passages[0]["title"] == "Big Little Lies (TV series)" and passages[0]["text"].endswith("seven episodes")
    deduped = [row for batch in dedupe_passages(import_questions("dpr-json", path, "nq", "dev").passages, tmp_path / "t")
               for row in batch.to_pylist()]
    assert sorted(p["passage_id"] for p in deduped) == sorted({p["passage_id"] for p in passages})


def test_dpr_json_malformed_element(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([DPR_JSON[0], {"question": "q", "answers": "seven"}]), encoding="utf-8")
    with pytest.raises(ImportFormatError, match=r"bad\.json: element 1: answers must be a list of strings"):
        import_questions("dpr-json", path, "nq", "dev").questions.to_table()


def test_dpr_qas(tmp_path: Path) -> None:
    path = tmp_path / "nq-test.qa.csv"
    path.write_text(
        'who got the first nobel prize in physics\t["Wilhelm Conrad Röntgen"]\n'
        "when is the next deadpool movie being released\t['May 18, 2018', \"Deadpool's 2\"]\n"
        'what does hp mean in war and order\t["hit points or health points"]\n',
        encoding="utf-8",
    )
    questions, passages, qrels = _tables(import_questions("dpr-qas", path, "nq", "test"))
    assert passages is None and qrels is None
    assert [q["answers"] for q in questions] == [
        ["Wilhelm Conrad Röntgen"], ["May 18, 2018", "Deadpool's 2"], ["hit points or health points"]]
    assert questions[1]["question"] == "when is the next deadpool movie being released"
    path.write_text('fine question\t["a"]\nno answers column here\n', encoding="utf-8")
    with pytest.raises(ImportFormatError, match=r"nq-test\.qa\.csv:2: expected question<TAB>\[answers\]"):
        import_questions("dpr-qas", path, "nq", "test").questions.to_table()
    path.write_text('fine question\t["a"]\nq\t["a", \n', encoding="utf-8")
    with pytest.raises(ImportFormatError, match=r"nq-test\.qa\.csv:2: answers column is not a list literal"):
        import_questions("dpr-qas", path, "nq", "test").questions.to_table()


def test_nq_open(tmp_path: Path) -> None:
    path = tmp_path / "NQ-open.dev.jsonl"
    path.write_text(
        '{"question": "when was the last time anyone was on the moon", "answer": ["14 December 1972 UTC", "December 1972"]}\n'
        '{"question": "who wrote he ain\'t heavy he\'s my brother lyrics", "answer": ["Bobby Scott", "Bob Russell"]}\n',
        encoding="utf-8",
    )
    questions, _, _ = _tables(import_questions("nq-open", path, "nq", "dev"))
    assert questions[0]["answers"] == ["14 December 1972 UTC", "December 1972"]
    assert questions[1]["question_id"] == stable_id("nq", "dev", "2")  # the line number when there is no id
    path.write_text('{"question": "q", "answer": ["a"]}\n{"question": "q", "answer": ["a"]\n', encoding="utf-8")
    with pytest.raises(ImportFormatError, match=r"NQ-open\.dev\.jsonl:2: not valid JSON"):
        import_questions("nq-open", path, "nq", "dev").questions.to_table()


def test_entityquestions_real_dev_files() -> None:
    folder = shared_data("entityquestions", "dev")
    questions, passages, _ = _tables(import_questions("entityquestions", folder / "P19.dev.json", "eq", "dev"))
    published = json.loads((folder / "P19.dev.json").read_text("utf-8"))
    assert passages is None and len(questions) == len(published)
    assert [(q["question"], q["answers"]) for q in questions] == [(r["question"], r["answers"]) for r in published]
    assert {q["relation"] for q in questions} == {"P19"}
    everything = import_questions("entityquestions", folder, "eq", "dev").questions.to_table()
    assert len(set(everything.column("relation").to_pylist())) == 24


def test_entityquestions_relation_from_file_name(tmp_path: Path) -> None:
    path = tmp_path / "P740.test.json"
    path.write_text(json.dumps([{"question": "Where was Dave & Buster's founded?", "answers": ["Dallas"]}]), "utf-8")
    questions, _, _ = _tables(import_questions("entityquestions", path, "eq", "test"))
    assert questions == [questions[0]] and questions[0]["relation"] == "P740" and questions[0]["answers"] == ["Dallas"]
    wrong = tmp_path / "birthplaces.json"
    wrong.write_text("[]", "utf-8")
    with pytest.raises(ImportFormatError, match="P19.dev.json"):
        import_questions("entityquestions", wrong, "eq", "test")


SQUAD = {
    "version": "1.1",
    "data": [
        {
            "title": "University_of_Notre_Dame",
            "paragraphs": [
                {
                    "context": "Architecturally, the school has a Catholic character. Atop the Main Building's gold "
                               "dome is a golden statue of the Virgin Mary.",
                    "qas": [
                        {"id": "5733be284776f41900661182", "question": "What sits on top of the Main Building?",
                         "answers": [{"answer_start": 92, "text": "a golden statue of the Virgin Mary"},
                                     {"answer_start": 92, "text": "a golden statue of the Virgin Mary"},
                                     {"answer_start": 94, "text": "golden statue"}]},
                    ],
                },
                {"context": "The university is the major seat of the Congregation of Holy Cross.",
                 "qas": [{"id": "5733bf84d058e614000b61be", "question": "What is the major seat?",
                          "answers": [{"answer_start": 0, "text": "The university"}]}]},
            ],
        }
    ],
}


def test_squad(tmp_path: Path) -> None:
    path = tmp_path / "dev-v1.1.json"
    path.write_text(json.dumps(SQUAD), encoding="utf-8")
    questions, passages, _ = _tables(import_questions("squad", path, "squad", "dev"))
    assert [p["passage_id"] for p in passages] == ["squad:0-0", "squad:0-1"]
    assert passages[0]["title"] == "University of Notre Dame"
    assert passages[1]["text"] == SQUAD["data"][0]["paragraphs"][1]["context"]
    assert questions[0]["answers"] == ["a golden statue of the Virgin Mary", "golden statue"]
    assert questions[0]["positive_ids"] == ["squad:0-0"] and questions[1]["positive_ids"] == ["squad:0-1"]
    assert questions[0]["question_id"] == stable_id("squad", "dev", "5733be284776f41900661182")
    broken = json.loads(json.dumps(SQUAD))
    broken["data"][0]["paragraphs"][1]["qas"][0]["answers"] = ["The university"]
    path.write_text(json.dumps(broken), encoding="utf-8")
    with pytest.raises(ImportFormatError, match=r"data\[0\]\.paragraphs\[1\]\.qas\[0\]: answers must be a list"):
        import_questions("squad", path, "squad", "dev").questions.to_table()


def _beir(folder: Path, qrels: str) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        '{"_id": "4983", "title": "Microstructural development of human newborn cerebral white matter", '
        '"text": "Alterations of the architecture of cerebral white matter", "metadata": {}}\n'
        '{"_id": "5836", "title": "Induction of myelodysplasia", "text": "Myelodysplastic syndromes (MDS) are", '
        '"metadata": {}}\n',
        encoding="utf-8",
    )
    (folder / "queries.jsonl").write_text(
        '{"_id": "1", "text": "0-dimensional biomaterials show inductive properties.", "metadata": {}}\n'
        '{"_id": "3", "text": "1,000 genomes project enables mapping of genetic sequence variation.", "metadata": {}}\n'
        '{"_id": "5", "text": "A query judged only in train.", "metadata": {}}\n',
        encoding="utf-8",
    )
    (folder / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    return folder


def test_beir(tmp_path: Path) -> None:
    folder = _beir(tmp_path / "scifact", "query-id\tcorpus-id\tscore\n1\t4983\t1\n3\t5836\t2\n3\t4983\t0\n")
    questions, passages, qrels = _tables(import_questions("beir", folder, "scifact", "test"))
    assert [q["question"] for q in questions] == [
        "0-dimensional biomaterials show inductive properties.",
        "1,000 genomes project enables mapping of genetic sequence variation."]
    assert questions[1]["positive_ids"] == ["scifact:5836"] and questions[1]["answers"] == []
    assert [p["passage_id"] for p in passages] == ["scifact:4983", "scifact:5836"]
    assert passages[1]["title"] == "Induction of myelodysplasia"
    assert qrels == [
        {"dataset": "scifact", "split": "test", "question_id": stable_id("scifact", "test", "1"),
         "passage_id": "scifact:4983", "relevance": 1},
        {"dataset": "scifact", "split": "test", "question_id": stable_id("scifact", "test", "3"),
         "passage_id": "scifact:5836", "relevance": 2},
        {"dataset": "scifact", "split": "test", "question_id": stable_id("scifact", "test", "3"),
         "passage_id": "scifact:4983", "relevance": 0},
    ]
    assert {q["question_id"] for q in questions} == {r["question_id"] for r in qrels}


def test_beir_malformed_qrels_line(tmp_path: Path) -> None:
    folder = _beir(tmp_path / "scifact", "query-id\tcorpus-id\tscore\n1\t4983\t1\n3\t5836\n")
    with pytest.raises(ImportFormatError, match=r"qrels/test\.tsv:3: expected query-id<TAB>corpus-id<TAB>integer"):
        import_questions("beir", folder, "scifact", "test").qrels.to_table()
    with pytest.raises(ImportFormatError, match="has no qrels/dev.tsv"):
        import_questions("beir", folder, "scifact", "dev")


def test_unknown_format_and_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown question format 'csv'"):
        import_questions("csv", tmp_path, "x", "y")
    with pytest.raises(FileNotFoundError):
        import_questions("nq-open", tmp_path / "absent.jsonl", "x", "y")


def test_dataset_specs() -> None:
    assert DatasetSpec.parse("nq:train") == DatasetSpec("nq", "train", 1.0)
    assert parse_dataset_specs(["nq:train", "trex:train:0.5"]) == [
        DatasetSpec("nq", "train", 1.0), DatasetSpec("trex", "train", 0.5)]
    assert str(DatasetSpec("trex", "train", 0.5)) == "trex:train:0.5"
    for bad in ("nq", "nq:train:0", "nq:train:-1", "nq:train:x", "nq:train:1:2", "n q:train", "nq:"):
        with pytest.raises(ValueError):
            DatasetSpec.parse(bad)
    with pytest.raises(ValueError, match="listed twice"):
        parse_dataset_specs(["nq:train", "nq:train:2"])


QAS_LINES = "".join(f'who is person number {i}?\t["Person {i}"]\n' for i in range(3000))


@pytest.mark.parametrize(("suffix", "compress"), [(".gz", "gzip"), (".bz2", "bz2")])
def test_truncated_compressed_file_names_file_and_line(tmp_path: Path, suffix: str, compress: str) -> None:
    """A cut .gz/.bz2 (an interrupted download) raised gzip's bare EOFError ('Compressed file
    ended before the end-of-stream marker was reached'), naming neither the file nor the line."""
    import bz2
    import gzip

    data = (gzip.compress if compress == "gzip" else bz2.compress)(QAS_LINES.encode("utf-8"), 9)
    path = tmp_path / f"nq-test.qas.tsv{suffix}"
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ImportFormatError, match=rf"^{path}:\d+: the {compress} stream ends before its end marker"):
        import_questions("dpr-qas", path, "nq", "test").questions.to_table()
    whole = tmp_path / f"whole.qas.tsv{suffix}"
    whole.write_bytes(data)
    assert import_questions("dpr-qas", whole, "nq", "test").questions.to_table().num_rows == 3000


def test_truncated_compressed_json_array_names_file(tmp_path: Path) -> None:
    import gzip

    records = [{"question": f"where was person {i} born?", "answers": [f"Town {i}"]} for i in range(3000)]
    data = gzip.compress(json.dumps(records).encode("utf-8"))
    path = tmp_path / "P19.dev.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImportFormatError, match=rf"^{path}: the gzip stream ends before its end marker"):
        import_questions("dpr-json", path, "eq", "dev").questions.to_table()


def test_file_named_gz_that_is_not_gzip(tmp_path: Path) -> None:
    path = tmp_path / "nq-test.qas.tsv.gz"
    path.write_text('secret question?\t["a"]\n', encoding="utf-8")
    with pytest.raises(ImportFormatError, match=rf"^{path}:1: not gzip data") as info:
        import_questions("dpr-qas", path, "nq", "test").questions.to_table()
    assert "secret" not in str(info.value) and "b'se'" not in str(info.value)  # gzip's message quotes them


def test_truncated_real_question_file() -> None:
    """squad24's dev questions, gzipped and cut: refused naming the line the stream ended in."""
    import gzip
    import tempfile

    raw = shared_data("squad24", "dev.qas.tsv").read_bytes()
    data = gzip.compress(raw)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dev.qas.tsv.gz"
        path.write_bytes(data[: len(data) // 2])
        with pytest.raises(ImportFormatError, match=rf"^{path}:(\d+): the gzip stream ends") as info:
            import_questions("dpr-qas", path, "squad24", "dev").questions.to_table()
        line = int(str(info.value).split(":")[1])
        assert 1 < line < raw.count(b"\n")


@pytest.mark.parametrize(
    ("fmt", "name", "content"),
    [
        ("dpr-qas", "empty.qas.tsv", ""),
        ("dpr-qas", "blank.qas.tsv", "\n\n"),
        ("nq-open", "empty.jsonl", ""),
        ("dpr-json", "empty.json", "[]"),
        ("entityquestions", "P19.dev.json", "[ ]"),
        ("squad", "empty-squad.json", '{"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": []}]}]}'),
    ],
)
def test_a_file_without_questions_is_refused(tmp_path: Path, fmt: str, name: str, content: str) -> None:
    """An empty question file was imported as `questions: 0` with a source recorded, where an
    empty passages file is refused: a file that brings nothing is the wrong file or format."""
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ImportFormatError, match=rf"^{path}: no questions \(.*\); a question import must bring"):
        import_questions(fmt, path, "d", "dev").questions.to_table()


def test_beir_split_with_no_judged_query_is_refused(tmp_path: Path) -> None:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text('{"_id": "7", "title": "T", "text": "Some text."}\n', "utf-8")
    (tmp_path / "queries.jsonl").write_text('{"_id": "1", "text": "a claim"}\n', "utf-8")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n", "utf-8")
    with pytest.raises(ImportFormatError, match=r"no query of queries.jsonl is judged in qrels/test.tsv"):
        import_questions("beir", tmp_path, "d", "test").questions.to_table()


@pytest.mark.parametrize("fmt", ["dpr-qas", "dpr-json", "nq-open", "squad"])
def test_a_folder_for_a_file_format_is_refused_by_name(tmp_path: Path, fmt: str) -> None:
    """A folder given to a one-file format failed with open()'s bare '[Errno 21] Is a directory'."""
    with pytest.raises(ImportFormatError, match=rf"^{tmp_path}: a folder, but the {fmt} format reads one file"):
        import_questions(fmt, tmp_path, "d", "dev").questions.to_table()
    file = tmp_path / "corpus.jsonl"
    file.write_text("{}\n", "utf-8")
    with pytest.raises(ImportFormatError, match=r"a file, but the beir format reads a dataset folder"):
        import_questions("beir", file, "d", "dev")


def test_a_raw_control_character_in_a_json_line_reads_cleanly(tmp_path: Path) -> None:
    """A raw tab inside a JSON string: the message said 'Invalid control character at at column 16'."""
    path = tmp_path / "dev.jsonl"
    path.write_text('{"question": "a\tb", "answer": ["x"]}\n', encoding="utf-8")
    with pytest.raises(ImportFormatError, match=r":1: not valid JSON \(Invalid control character at column 16\)$"):
        import_questions("nq-open", path, "d", "dev").questions.to_table()


def test_titles_are_strings_or_null(tmp_path: Path) -> None:
    """A null SQuAD title became the passage title "None" and a list "['x']" (str() of the value);
    a null title now reads as "" (as BEIR's and DPR's missing titles do), any other non-string is refused."""
    article = {"paragraphs": [{"context": "Paris is in France.",
                               "qas": [{"id": "a", "question": "Where is Paris?", "answers": [{"text": "France"}]}]}]}
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"data": [{**article, "title": None}, article]}), encoding="utf-8")
    titles = import_questions("squad", path, "sq", "dev").passages.to_table().column("title").to_pylist()
    assert titles == ["", ""]
    path.write_text(json.dumps({"data": [{**article, "title": ["x"]}]}), encoding="utf-8")
    with pytest.raises(ImportFormatError, match=r"data\[0\]: title must be a string \(or null\), got a JSON array"):
        import_questions("squad", path, "sq", "dev").passages.to_table()
    dpr = tmp_path / "train.dpr.json"
    contexts = [{"text": "no title", "passage_id": "1"}, {"title": None, "text": "null title", "passage_id": "2"}]
    dpr.write_text(json.dumps([{"question": "q?", "answers": ["a"], "positive_ctxs": contexts}]), encoding="utf-8")
    assert import_questions("dpr-json", dpr, "d", "train").passages.to_table().column("title").to_pylist() == ["", ""]
    contexts.append({"title": 5, "text": "a number", "passage_id": "3"})
    dpr.write_text(json.dumps([{"question": "q?", "answers": ["a"], "positive_ctxs": contexts}]), encoding="utf-8")
    with pytest.raises(ImportFormatError, match=r"element 0, positive_ctxs\[2\]: title must be a string"):
        import_questions("dpr-json", dpr, "d", "train").passages.to_table()


def test_entityquestions_folder_entry_that_is_no_file_is_named(tmp_path: Path) -> None:
    """A P*.json in the folder that is a folder or a link loop failed with a bare errno message."""
    (tmp_path / "P19.dev.json").write_text(json.dumps([{"question": "Where was X born?", "answers": ["Y"]}]), "utf-8")
    (tmp_path / "P20.dev.json").mkdir()
    with pytest.raises(ImportFormatError, match=r"P20.dev.json: not a file \(a folder, or a link"):
        import_questions("entityquestions", tmp_path, "eq", "dev")
    (tmp_path / "P20.dev.json").rmdir()
    (tmp_path / "P20.dev.json").symlink_to(tmp_path / "P20.dev.json")
    with pytest.raises(ImportFormatError, match=r"P20.dev.json: not a file"):
        import_questions("entityquestions", tmp_path, "eq", "dev")
