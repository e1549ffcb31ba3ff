"""Question imports are exact: malformed records, duplicate ids, sources and replacing (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odqa.storage import Workspace
from tests.boundaries.conftest import workspace_state


def _qas(path: Path, *rows: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{r}\n" for r in rows), encoding="utf-8")
    return path


def _nq(path: Path, *records: tuple[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i, "question": q, "answer": ["a"]}) + "\n" for i, q in records))
    return path


def _squad(path: Path, *contexts: str) -> Path:
    paragraphs = [{"context": c, "qas": [{"id": f"{path.stem}-{n}", "question": f"q {c}?",
                                          "answers": [{"text": c.split()[0], "answer_start": 0}]}]}
                  for n, c in enumerate(contexts)]  # fmt: skip
    path.write_text(json.dumps({"data": [{"title": "T", "paragraphs": paragraphs}]}), encoding="utf-8")
    return path


def _import(cli, ws: Path, fmt: str, path: Path, *flags: str, split: str = "dev", ok: bool = True):
    return cli("--workspace", str(ws), "import", "questions", "--format", fmt, "--dataset", "nq", "--split", split,
               *flags, str(path), ok=ok)  # fmt: skip


def _refused(cli, ws: Path, fmt: str, path: Path, *expected: str, flags: tuple[str, ...] = (),
             split: str = "dev") -> str:  # fmt: skip
    """Import `path`, expecting a refusal whose message holds `expected`; the workspace is unchanged."""
    before = workspace_state(ws)
    result = _import(cli, ws, fmt, path, *flags, split=split, ok=False)
    assert result.exit_code != 0, result.output
    for text in expected:
        assert text in result.output, result.output
    assert workspace_state(ws) == before
    return result.output


def _questions(ws: Path) -> list[str]:
    return (
        Workspace.resolve(ws)
        .sql("SELECT question FROM questions ORDER BY question")
        .column("question")
        .to_pylist()
    )


@pytest.fixture
def ws(cli, tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    _import(
        cli, root, "nq-open", _nq(tmp_path / "seed" / "dev.jsonl", ("s1", "seed one"), ("s2", "seed two"))
    )
    return root


def test_malformed_question_records_are_refused_with_file_and_line(cli, ws: Path, tmp_path: Path) -> None:
    stray = _qas(tmp_path / "stray.qa.csv", "fine?\t['a']", "\"opened here?\t['b']", "closed here\"\t['c']")
    _refused(
        cli, ws, "dpr-qas", stray, f"{stray}:2", "quot"
    )  # the old reader merged lines 2-3 into one question
    fields = _qas(tmp_path / "fields.qa.csv", 'fine?\t["a"]', 'a tab\tinside?\t["b"]\tid\textra')
    _refused(cli, ws, "dpr-qas", fields, f"{fields}:2", "5 tab-separated field(s)")
    latin = tmp_path / "latin.qa.csv"
    latin.write_bytes('fine?\t["a"]\nZ\xfcrich?\t["b"]\n'.encode("latin-1"))
    _refused(cli, ws, "dpr-qas", latin, f"{latin}:2", "not UTF-8", "0xfc")
    long = _qas(tmp_path / "long.qa.csv", 'fine?\t["a"]', "w " * 600 + '?\t["b"]')
    _refused(
        cli, ws, "dpr-qas", long, f"{long}:2", "longer than 1,000 bytes", flags=("--max-record-bytes", "1000")
    )
    element = tmp_path / "big.json"
    element.write_text(
        json.dumps([{"question": "q?", "answers": ["a"], "positive_ctxs": [{"text": "x " * 900}]}])
    )
    _refused(cli, ws, "dpr-json", element, f"{element}: element 0", "longer than 1,000 characters",
             flags=("--max-record-bytes", "1000"))  # fmt: skip
    assert _questions(ws) == ["seed one", "seed two"]


def test_duplicate_question_ids_are_refused_naming_both_sources(cli, ws: Path, tmp_path: Path) -> None:
    within = _nq(tmp_path / "within.jsonl", ("d1", "one"), ("d2", "two"), ("d1", "again"))
    _refused(cli, ws, "nq-open", within, "(2 times)", str(within))  # the old import stored both rows
    across = _nq(tmp_path / "copy" / "dev.jsonl", ("n1", "new"), ("s2", "clash"))
    seed = tmp_path / "seed" / "dev.jsonl"
    _refused(
        cli,
        ws,
        "nq-open",
        across,
        str(across),
        f"import-questions:nq:dev:nq-open:{seed}",
        "--on-duplicate keep-existing",
    )
    out = _import(cli, ws, "nq-open", across, "--on-duplicate", "keep-existing").output
    assert "questions: 1" in out and "skipped_duplicates: 1" in out and "kept: 2" in out and "total: 3" in out
    assert _questions(ws) == ["new", "seed one", "seed two"]


def test_a_second_file_adds_and_replacing_needs_the_flag(cli, ws: Path, tmp_path: Path) -> None:
    other = _nq(tmp_path / "other" / "dev.jsonl", ("o1", "other one"))
    out = _import(
        cli, ws, "nq-open", other, split="test"
    ).output  # the old import keyed sources by dataset:split
    assert "questions: 1" in out and "replaced: 0" in out and "kept: 2" in out and "total: 3" in out
    _import(cli, ws, "nq-open", other, split="train")  # one file under two splits: two sources, other ids
    _nq(other, ("o1", "changed"), ("o2", "second"))
    _refused(cli, ws, "nq-open", other, "imported before", "--replace", split="test")
    out = _import(cli, ws, "nq-open", other, "--replace", split="test").output
    assert "questions: 2" in out and "replaced: 1" in out and "kept: 3" in out and "total: 5" in out
    assert _questions(ws) == ["changed", "other one", "second", "seed one", "seed two"]


def test_a_passage_id_with_another_text_is_refused(cli, ws: Path, tmp_path: Path) -> None:
    """Two SQuAD files number their paragraphs alike: the old import kept train's paragraph under
    dev's id and pointed dev's questions at it."""
    _import(cli, ws, "squad", _squad(tmp_path / "train.json", "Paris is in France."), split="train")
    dev = _squad(tmp_path / "dev.json", "Oslo is in Norway.")
    _refused(cli, ws, "squad", dev, "'nq:0-0'", "another text", str(tmp_path / "train.json"), split="dev")
    texts = Workspace.resolve(ws).sql("SELECT text FROM passages").column("text").to_pylist()
    assert texts == ["Paris is in France."]
