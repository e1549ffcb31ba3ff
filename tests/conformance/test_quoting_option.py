"""`--quoting csv|none` on the import verbs: a question or passage file whose quotes are text goes in
as raw lines; the import deployments offer it as a choice; a format without a tab-separated
file refuses it before any work starts (docs/interop.md, "--quoting none")."""

from __future__ import annotations

from pathlib import Path

import pytest

from odqa.storage import Workspace

from .conftest import reference_figures

QAS = reference_figures("dpr_tsv_loaders.json")["dpr-qas"]
TITLED = QAS["leading quoted title"]["content"]  # "An Account of Further Discoveries in Air" was published ...


def _questions(root: Path, split: str) -> list[str]:
    table = Workspace.open_existing(root).read_table("questions", columns=["question", "split"])
    return sorted(q for q, s in zip(table["question"].to_pylist(), table["split"].to_pylist(), strict=True) if s == split)


def test_the_question_import_reads_csv_quoting_or_raw_lines(cli, tmp_path: Path) -> None:
    """The motivating file through `odqa import questions`: csv.reader's record by default, the
    line as it is with --quoting none; a quote left open is refused, suggesting --quoting none
    (which reads it raw: test_dpr_tsv_loaders.py)."""
    root, path = tmp_path / "ws", tmp_path / "dev.qas.tsv"
    path.write_text(TITLED, encoding="utf-8")
    base = ("--workspace", str(root), "import", "questions", "--format", "dpr-qas", "--dataset", "real")
    cli(*base, "--split", "csv", str(path))
    cli(*base, "--split", "raw", "--quoting", "none", str(path))
    assert _questions(root, "csv")[0] == "An Account of Further Discoveries in Air was published by who in 1775?"
    assert _questions(root, "raw")[0] == '"An Account of Further Discoveries in Air" was published by who in 1775?'
    opened = tmp_path / "open.qas.tsv"
    opened.write_text(QAS["quote left open merges the next lines"]["content"], encoding="utf-8")
    refused = cli(*base, "--split", "open", str(opened), ok=False)
    assert refused.exit_code != 0 and f"{opened}:2: a field opens a quote" in refused.output, refused.output
    assert "--quoting none" in refused.output and "Moby" not in refused.output


def test_quoting_none_for_a_format_without_a_tab_separated_file_is_a_usage_error(cli, tmp_path: Path) -> None:
    path = tmp_path / "dev.jsonl"
    path.write_text('{"question": "q", "answer": ["a"]}\n', encoding="utf-8")
    result = cli("--workspace", str(tmp_path / "ws"), "import", "questions", "--format", "nq-open", "--dataset", "d",
                 "--split", "s", "--quoting", "none", str(path), ok=False)  # fmt: skip
    assert result.exit_code == 2 and "--quoting none reads tab-separated files" in result.output, result.output


@pytest.mark.parametrize(
    "entrypoint",
    ["odqa.flows.stages.questions:import_questions_flow", "odqa.flows.stages.passages:import_passages_flow"],
)
def test_the_import_deployments_offer_quoting_as_a_choice(entrypoint: str) -> None:
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameter_schema

    quoting = parameter_schema(load_flow_from_entrypoint(entrypoint)).model_dump()["properties"]["quoting"]
    assert quoting["enum"] == ["csv", "none"] and quoting["default"] == "csv"
