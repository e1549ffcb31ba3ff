"""The setup files of `odqa reproduce` (storage/paper_setups/): each one validates, every paper
figure and hyper-parameter has a source, every resource is in `odqa fetch`'s registry and every
question set it trains or evaluates on comes from those resources; and the side-by-side arithmetic."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from odqa.models.settings import TrainSettings
from odqa.pipelines.downloads.registry import load_registry
from odqa.pipelines.reproduction import printable, side_by_side
from odqa.storage.choices import SetupName
from odqa.storage.setups import SETUPS_DIR, load_setup, read_setup_file, setup_names

PAPERS = Path(__file__).resolve().parents[2].parent / "shared" / "papers"


def test_the_setups_are_the_files_and_the_issue_names_them() -> None:
    assert set(typing.get_args(SetupName)) == set(setup_names())
    assert {"dpr-taser-nq", "taser-entityquestions", "dual-encoder-comparison"} <= set(setup_names())
    assert any(name.startswith("desire-me-") for name in setup_names())


@pytest.mark.parametrize("name", setup_names())
def test_every_setup_validates_and_names_real_resources(name: str) -> None:
    setup = load_setup(name)
    TrainSettings(**setup.training)  # the paper's hyper-parameters are trainer settings
    registry = load_registry()
    assert set(setup.resources) <= set(registry), set(setup.resources) - set(registry)
    produced = {(registry[r].dataset, registry[r].split) for r in setup.resources}
    produced |= {(registry[r].dataset, split) for r in setup.resources if registry[r].format == "beir"
                 for split in setup.beir_splits}  # fmt: skip
    for spec in setup.train + setup.evaluate:
        dataset, split = spec.split(":")[:2]
        assert (dataset, split) in produced, (name, spec)
    for figure in setup.figures:
        assert figure.source and f"{figure.dataset}:{figure.split}" in setup.evaluate, figure
    assert setup.projected.basis and all("RESULTS.md" in step or "no GPU" in step for step in setup.projected.basis)
    if PAPERS.exists():  # the paper the figures come from is one of the papers
        assert (PAPERS / setup.paper.split()[0]).exists(), setup.paper


def _copy_with(tmp_path: Path, old: str, new: str) -> Path:
    text = (SETUPS_DIR / "dpr-taser-nq.yaml").read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "dpr-taser-nq.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def test_a_figure_without_source_or_a_value_without_one_is_refused(tmp_path: Path) -> None:
    no_source = _copy_with(tmp_path, 'source: "TASER Table 1 (§4.2): R@20 on NQ test, single-set; †',
                           'source: "", note: "†')  # fmt: skip
    with pytest.raises(ValueError, match=r"dpr-taser-nq.yaml: figures\.0\.(source|note)"):
        read_setup_file(no_source)
    unsourced = _copy_with(tmp_path, "  lr: 3.0e-5\n", "  lr: 3.0e-5\n  seed: 3\n")
    with pytest.raises(ValueError, match="hyper-parameters without a source: seed"):
        read_setup_file(unsourced)


def test_side_by_side_gives_the_difference_in_the_papers_units() -> None:
    figures = load_setup("dpr-taser-nq").figures
    runs = {("TASER", "nq", "test"): "taser-run", ("BM25", "nq", "test"): "bm25-run"}
    measured = {("taser-run", "R@20"): 0.8, ("bm25-run", "R@20"): 0.629, ("bm25-run", "R@100"): 0.8}
    rows = side_by_side(figures, runs, lambda run, dataset, split, metric: measured.get((run, metric)))
    by = {(r.retriever, r.metric): r for r in rows}
    assert by[("TASER", "R@20")].difference == pytest.approx(0.8 - 0.837)
    assert by[("DPR", "R@20")].measured is None and by[("DPR", "R@20")].run is None  # not run: shown, not dropped
    table = {(r["retriever"], r["metric"]): r for r in printable(rows)}
    assert table[("TASER", "R@20")] | {} == {**table[("TASER", "R@20")], "paper": "83.7", "run": "80.0",
                                             "difference": "-3.7"}  # fmt: skip
    assert table[("DPR", "R@20")]["run"] == "-"


def test_reproduce_list_names_every_setup_with_its_hardware_and_projected_time(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from odqa.flows.cli import main

    result = CliRunner().invoke(main, ["-w", str(tmp_path / "none"), "reproduce", "--list"])
    assert result.exit_code == 0, result.output
    listed = [line for line in result.output.splitlines() if line and not line.startswith(" ")]
    assert listed == sorted(setup_names())
    assert result.output.count("\n  hardware: ") == result.output.count("\n  projected: about ") == len(listed)
    assert not (tmp_path / "none").exists()  # --list makes no workspace


def test_the_docs_table_gives_each_setups_command_projected_time_and_figures() -> None:
    """docs/reproducing-papers.md's table, row by row, against the setup files it documents."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "reproducing-papers.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip().strip("`"): line for line in docs.splitlines()
            if line.startswith("| `") and "`odqa reproduce " in line}  # fmt: skip
    assert set(rows) == set(setup_names())
    for name, row in rows.items():
        setup = load_setup(name)
        assert f"`odqa reproduce {name}`" in row
        assert f"| {setup.projected.hours:g} h |" in row, (name, setup.projected.hours)
        for figure in setup.figures:
            assert f"{figure.value:g}" in row, (name, figure.paper_row, figure.metric, figure.value)
