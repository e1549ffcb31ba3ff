"""An exported model loads without warnings, the same way every time, and cannot be misused quietly
(issue 37): the BERT pooler odqa never keeps goes with the export (the base's, else a fixed
initialisation), plain `encode` on a two-tower export raises instead of using the passage tower,
and the card names the base without a local path."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from odqa.models.backbone import load_pretrained_encoder
from odqa.models.export_backbone import complete_encoder
from odqa.models.export_st import export_sentence_transformers
from odqa.models.retriever import create_retriever
from odqa.storage.model_registry import public_model_name
from tests.models.conftest import minilm_path
from tests.models.test_export_st import PASSAGES, QUESTIONS

pytest.importorskip("sentence_transformers")

POOLER = ("pooler.dense.bias", "pooler.dense.weight")


@contextlib.contextmanager
def load_messages() -> Iterator[list[str]]:
    """Every warning that transformers, sentence-transformers or Python's `warnings` emit inside."""
    import transformers

    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    loggers = [logging.getLogger("transformers"), logging.getLogger("sentence_transformers")]
    previous = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_warning()
    for logger in loggers:
        logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield messages
        messages.extend(str(w.message) for w in caught)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        transformers.logging.set_verbosity(previous)


def _pooler_of(folder: Path, prefix: str = "") -> dict[str, torch.Tensor]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
        return {name: weights.get_tensor(prefix + name) for name in POOLER}


@pytest.fixture(scope="module")
def two_tower_export(tiny_checkpoint: str, tmp_path_factory: pytest.TempPathFactory):
    """An ADE (two towers, a Router) on the tiny BERT, whose checkpoint has no pooler, exported
    under a model name that is a local path."""
    torch.manual_seed(0)
    retriever = create_retriever("ade", base=tiny_checkpoint)
    with torch.no_grad():  # make the towers differ, as training does
        for parameter in retriever.passage_tower.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    out = tmp_path_factory.mktemp("export") / "ade"
    name = str(tmp_path_factory.getbasetemp() / "models" / "my-ade")
    exported = export_sentence_transformers(retriever, out, name)
    return retriever, out, exported, name


def test_transformers_loads_each_tower_without_warnings_and_the_same_pooler_each_time(two_tower_export):
    from transformers import AutoModel, AutoTokenizer

    _, out, exported, _ = two_tower_export
    for route in ("query", "document"):
        folder = out / exported.hf_folders[route]
        inputs = AutoTokenizer.from_pretrained(folder)(QUESTIONS, padding=True, return_tensors="pt")
        outputs = []
        for _ in range(2):
            with load_messages() as messages:
                model, info = AutoModel.from_pretrained(folder, output_loading_info=True)
            assert messages == [], messages
            assert not info["missing_keys"] and not info["unexpected_keys"], info
            with torch.no_grad():
                outputs.append(model.eval()(**inputs).pooler_output)
        assert torch.equal(outputs[0], outputs[1]), route
    assert exported.added_weights == list(POOLER) and exported.added_from == "initialised"


def test_sentence_transformers_loads_without_warnings_and_plain_encode_names_the_routes(two_tower_export):
    from sentence_transformers import SentenceTransformer

    retriever, out, _, _ = two_tower_export
    with load_messages() as messages:
        model = SentenceTransformer(str(out), device="cpu")
        queries = model.encode_query(QUESTIONS)
        passages = model.encode_document(PASSAGES)
    assert messages == [], messages
    np.testing.assert_allclose(queries, retriever.encode_questions(QUESTIONS, show_progress=False), atol=1e-5)
    titles, texts = zip(*PASSAGES, strict=True)
    np.testing.assert_allclose(passages, retriever.encode_passages(list(titles), list(texts), show_progress=False),
                               atol=1e-5)  # fmt: skip
    with pytest.raises(ValueError, match="Could not determine route for task=None") as refused:
        model.encode(QUESTIONS)
    assert "task='query' and task='document'" in str(refused.value)


def test_card_and_files_name_no_local_path(two_tower_export, tiny_checkpoint: str):
    _, out, _, name = two_tower_export
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "# my-ade" in card and f"base: a local folder named `{Path(tiny_checkpoint).name}`" in card
    assert "plain `encode(texts)` raises" in card and "`encode_query` or `encode_document`" in card
    assert "initialised as the architecture initialises them, under a fixed seed" in card
    for file in out.rglob("*"):
        if file.is_file() and file.suffix in (".md", ".json", ".txt"):
            text = file.read_text(encoding="utf-8")
            for local in (tiny_checkpoint, str(Path(tiny_checkpoint).parent), name, str(out)):
                assert local not in text, (file, local)


def test_public_model_name_keeps_hub_names_and_drops_local_paths(tmp_path: Path):
    assert public_model_name("sentence-transformers/all-MiniLM-L6-v2").hub_name == "sentence-transformers/all-MiniLM-L6-v2"
    cached = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / "abc123"
    cached.mkdir(parents=True)
    assert public_model_name(str(cached)).hub_name == "sentence-transformers/all-MiniLM-L6-v2"
    assert public_model_name(str(tmp_path / "hub" / "models--bert-base-uncased" / "snapshots" / "x")).label == (
        "bert-base-uncased")  # fmt: skip
    local = public_model_name(str(tmp_path / "my-bert"))
    assert (local.label, local.hub_name) == ("my-bert", None)


@pytest.mark.parametrize("head", ["model", "pretraining"])
def test_the_base_pooler_is_carried_whether_or_not_the_base_has_a_head(head: str, tiny_checkpoint: str, tmp_path: Path):
    """A base saved as BertModel keys its pooler `pooler.*`; one saved with a head (as
    bert-base-uncased is) keys it `bert.pooler.*`."""
    from transformers import BertConfig, BertForPreTraining, BertModel

    base = tmp_path / head
    config = BertConfig.from_pretrained(tiny_checkpoint)
    torch.manual_seed(4)
    (BertModel(config) if head == "model" else BertForPreTraining(config)).save_pretrained(base)
    completed = complete_encoder(load_pretrained_encoder(str(base)), str(base))
    assert (completed.added, completed.source) == (POOLER, "base")
    carried = _pooler_of(base, "" if head == "model" else "bert.")
    for name in POOLER:
        assert torch.equal(completed.model.state_dict()[name], carried[name]), name


def test_a_missing_pooler_is_initialised_the_same_in_every_export(tiny_checkpoint: str):
    encoder = load_pretrained_encoder(tiny_checkpoint)
    torch.manual_seed(123)  # the caller's random state plays no part, and is left as it was
    state = torch.random.get_rng_state()
    first = complete_encoder(encoder, tiny_checkpoint)
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.manual_seed(456)
    second = complete_encoder(encoder, tiny_checkpoint)
    assert first.source == second.source == "initialised"
    for name in POOLER:
        assert torch.equal(first.model.state_dict()[name], second.model.state_dict()[name]), name


def test_minilm_export_carries_minilm_pooler(tmp_path: Path):
    """The real checkpoint: all-MiniLM-L6-v2 keeps its trained pooler, which odqa drops on load."""
    base = str(minilm_path())
    completed = complete_encoder(load_pretrained_encoder(base), base)
    assert (completed.added, completed.source) == (POOLER, "base")
    carried = _pooler_of(minilm_path())
    for name in POOLER:
        assert torch.equal(completed.model.state_dict()[name], carried[name]), name
