"""The watch folder (a re-index's files) reads DPR TSV with the same reader as `odqa import
passages`: the leading quoted title as DPR's csv.reader reads it; a quote left open refused
naming file and line, and no byte of the file in the run's error or log (docs/boundaries.md)."""

from __future__ import annotations

import logging

import pytest

from odqa.flows.compositions.ingest_run import MalformedFilesError
from odqa.storage import Workspace
from tests.boundaries.test_watch_folder import _age, _run

from .conftest import reference_figures

PASSAGES = reference_figures("dpr_tsv_loaders.json")["dpr-tsv"]


def test_the_watch_folder_reads_passages_as_dprs_csv_reader(workspace: Workspace,
                                                            caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    incoming = workspace.root / "incoming"
    incoming.mkdir()
    titled, opened = incoming / "a-titled.tsv", incoming / "b-open.tsv"
    for path, case in ((titled, "leading quoted title"), (opened, "quote left open merges the next lines")):
        path.write_bytes(PASSAGES[case]["content"].encode("utf-8"))
        _age(path)
    with caplog.at_level(logging.DEBUG), pytest.raises(MalformedFilesError) as refused:
        _run(workspace, incoming)
    message = str(refused.value)
    assert f"{opened}:2: a field opens a quote that this line does not close" in message, message
    assert "Pequod" not in message + caplog.text  # the open line's text
    again = _run(workspace, incoming)  # the open file is set aside; the titled one goes in
    assert again.added == ["a-titled.tsv"], again
    rows = workspace.sql("SELECT passage_id AS id, text, title FROM passages ORDER BY 1").to_pylist()
    assert rows == PASSAGES["leading quoted title"]["records"]

