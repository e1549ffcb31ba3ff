"""`odqa import passages` / `odqa export passages` through the CLI and Prefect flows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.passages.dpr_sample import DPR_TSV


def test_import_export_round_trip_and_noop(cli, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    src = tmp_path / "psgs_w100.tsv"
    src.write_text(DPR_TSV, encoding="utf-8")
    first = cli("--workspace", str(ws), "import", "passages", "--format", "dpr-tsv", str(src))
    assert "passages: 3" in first.output
    again = cli("--workspace", str(ws), "import", "passages", "--format", "dpr-tsv", str(src))
    assert "no-op" in again.output
    out = tmp_path / "export.tsv"
    cli("--workspace", str(ws), "export", "passages", "--format", "dpr-tsv", str(out))
    assert out.read_text(encoding="utf-8") == src.read_text(encoding="utf-8").replace('""Ahärôn""', '""Ahärôn""')
    listed = cli("--workspace", str(ws), "sql", "SELECT passage_id, position FROM passages ORDER BY passage_id", "--format", "csv")
    assert listed.output.strip().splitlines() == ["passage_id,position", "1,0", "2,1", "3,0"]


def test_import_beir_and_bad_input_message(cli, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    corpus = tmp_path / "beir"
    corpus.mkdir()
    (corpus / "corpus.jsonl").write_text('{"_id": "a", "title": "T", "text": "x"}\nnot json\n', encoding="utf-8")
    result = cli("--workspace", str(ws), "import", "passages", "--format", "beir", str(corpus), ok=False)
    assert result.exit_code == 1
    assert "corpus.jsonl:2: not valid JSON" in result.output
    assert not ws.exists()  # refused at the file's head, before the workspace was made


def test_a_folder_given_to_dpr_tsv_is_refused_as_a_folder(cli, tmp_path: Path) -> None:
    """Before, the import looked for a BEIR corpus.jsonl in it ("passage file not found:
    <folder>/corpus.jsonl"), a file --format dpr-tsv never reads."""
    from odqa.flows.stages.passages import import_passages_flow

    ws, folder = tmp_path / "ws", tmp_path / "corpus"
    folder.mkdir()
    (folder / "psgs_w100.tsv").write_text(DPR_TSV, encoding="utf-8")
    result = cli("--workspace", str(ws), "import", "passages", "--format", "dpr-tsv", str(folder), ok=False)
    assert result.exit_code == 1 and "corpus.jsonl" not in result.output.replace("holding corpus.jsonl", "")
    assert f"{folder} is a folder; --format dpr-tsv reads one file" in result.output, result.output
    assert not ws.exists()
    with pytest.raises(IsADirectoryError, match="is a folder; --format dpr-tsv reads one file"):  # the deployment's way
        import_passages_flow.fn(fmt="dpr-tsv", path=str(folder), workspace=str(ws))
    empty = tmp_path / "beir"
    empty.mkdir()
    refused = cli("--workspace", str(ws), "import", "passages", "--format", "beir", str(empty), ok=False)
    assert f"passage file not found: {empty / 'corpus.jsonl'} (a BEIR folder holds corpus.jsonl)" in refused.output
