"""The registry and the `odqa fetch` verb: `--list` names the papers' resources (answering without
a workspace or a server), a user's `--registry` adds a resource and its bad entries are refused
naming file, entry and expectation, unknown names get close matches, and a fetch through
`--mirror` ends in the import of the files (a tiny DPR passages file and question set)."""

from __future__ import annotations

import hashlib

import pytest
from click.testing import CliRunner

from odqa.flows.cli import main
from odqa.pipelines.downloads.registry import RegistryError, load_registry, mirrored, resolve

from .loopback_http import LoopbackServer

PASSAGES = b'id\ttext\ttitle\n1\t"Paris is the capital of France."\tParis\n2\tBerlin is in Germany.\tBerlin\n'
QUESTIONS = b"what is the capital of france?\t['Paris']\nwhere is berlin?\t['Germany']\n"


def test_list_names_the_dpr_entityquestions_paq_wikipedia_and_beir_resources(tmp_path):
    result = CliRunner().invoke(main, ["-w", str(tmp_path / "none"), "fetch", "--list"])
    assert result.exit_code == 0, result.output
    for name in ("data.wikipedia_split.psgs_w100", "data.retriever.qas.nq-test", "data.retriever.nq-train",
                 "entityquestions.test", "paq.PAQ_metadata", "wikipedia.enwiki-20250601.pages-articles",
                 "wikipedia.enwiki-20250601.categorylinks", "beir.climate-fever"):  # fmt: skip
        assert name in result.output
    rows = {line.split()[0]: line.split()[1:3] for line in result.output.splitlines() if line.strip()}
    assert rows["data.wikipedia_split.psgs_w100"] == ["4.4", "GiB"]  # the registry's exact size, shown
    assert rows["beir.fever"] == ["1.2", "GiB"] and rows["data.retriever.qas.nq-test"][0] == "?"  # none known yet
    assert not (tmp_path / "none").exists()  # --list makes no workspace


def test_the_shipped_registry_gives_the_publishers_checksums():
    resources = load_registry()
    assert resources["beir.nq"].checksum.digest == "d4d3d2e48787a744b6f6e691ff534307"
    passages = resources["data.wikipedia_split.psgs_w100"]  # ir_datasets' size, HF wiki_dpr's sha256
    assert passages.size == 4_694_541_059 and passages.checksum.algorithm == "sha256"
    dump = resources["wikipedia.enwiki-20250601.page"]
    assert dump.checksum.algorithm == "sha1" and dump.checksum.sums_url.endswith("enwiki-20250601-sha1sums.txt")
    assert resources["data.retriever.qas.nq-test"].checksum is None  # DPR publishes none: recorded at first download


@pytest.mark.parametrize(("entry", "expected"), [
    ("url: ftp://x.org/a.tsv", r"entry 'mine': url: expected an http:// or https:// URL"),
    ("url: https://x.org/a.tsv\n  sha256: abc", r"entry 'mine': sha256: expected 64 hex digits"),
    ("url: https://x.org/a.tsv\n  import: import questions\n  format: dpr-qas",
     r"entry 'mine': `import questions` stores under a dataset and split: give \['dataset', 'split'\]"),
    ("url: https://x.org/a.tsv\n  import: import passages\n  format: csv", r"entry 'mine': format: `import passages` reads \[.dpr-tsv., .beir.\], got .csv."),
    ("url: https://x.org/a.tsv\n  sizes: 3", r"entry 'mine': unknown keys \['sizes'\]"),
])  # fmt: skip
def test_a_bad_registry_entry_is_refused_naming_the_file_the_entry_and_what_was_expected(tmp_path, entry, expected):
    registry = tmp_path / "mine.yaml"
    registry.write_text(f"mine:\n  {entry}\n")
    with pytest.raises(RegistryError, match=rf"{registry}: {expected}"):
        load_registry(registry)


def test_an_unknown_name_is_refused_with_its_close_matches():
    with pytest.raises(RegistryError, match=r"'data.retriever.qas.nq-tset' \(did you mean: data.retriever.qas.nq-test"):
        resolve(["data.retriever.qas.nq-tset"], load_registry())


def test_mirror_maps_https_host_path_to_base_host_path():
    assert mirrored("https://dl.fbaipublicfiles.com/dpr/a.csv", "http://proxy:8080/m/") == \
        "http://proxy:8080/m/dl.fbaipublicfiles.com/dpr/a.csv"  # fmt: skip


def test_fetch_through_a_mirror_with_a_users_registry_downloads_verifies_and_imports(tmp_path, cli):
    site = tmp_path / "mirror" / "data.example.org" / "tiny"
    site.mkdir(parents=True)
    (site / "passages.tsv").write_bytes(PASSAGES)
    (site / "test.qa.csv").write_bytes(QUESTIONS)
    registry = tmp_path / "mine.yaml"
    registry.write_text(
        "tiny.passages:\n  url: https://data.example.org/tiny/passages.tsv\n  format: dpr-tsv\n"
        f"  import: import passages\n  sha256: {hashlib.sha256(PASSAGES).hexdigest()}\n"
        "tiny.qas.test:\n  url: https://data.example.org/tiny/test.qa.csv\n  format: dpr-qas\n  dataset: tiny\n"
        "  split: test\n  import: import questions\n"
    )
    ws = tmp_path / "ws"
    with LoopbackServer(tmp_path / "mirror") as mirror:
        listed = cli("-w", str(ws), "fetch", "--list", "--registry", str(registry)).output
        assert "tiny.passages" in listed and "tiny.qas.test" in listed
        result = cli("-w", str(ws), "fetch", "tiny.qas.test", "tiny.passages", "--registry", str(registry),
                     "--mirror", mirror.url)  # fmt: skip
    assert "tiny.passages:" in result.output and "import passages" in result.output
    assert "sha256 recorded now" in result.output and "import questions" in result.output
    from odqa.storage import Workspace

    workspace = Workspace.open_existing(ws)
    assert workspace.rows("passages") == 2 and workspace.rows("questions") == 2
    assert (ws / "downloads" / "data.example.org" / "tiny" / "passages.tsv").read_bytes() == PASSAGES
