"""Save -> load keeps every part and gives identical embeddings; pickles are refused."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from odqa.models.backbone import UnsafeCheckpointError
from odqa.models.retriever import create_retriever, load_retriever

from .conftest import minilm_path

QUESTIONS = ["who wrote hamlet", "what is the capital of france"]
TITLES = ["Hamlet", "Paris"]
TEXTS = ["Hamlet is a tragedy by William Shakespeare.", "Paris is the capital of France."]

ARCHS = [
    ("dpr", {}),
    ("sde", {}),
    ("ade-ste", {}),
    ("ade-fte", {}),
    ("ade-spl", {"projection_dim": 24}),
    ("taser", {}),
    ("taser", {"routing": "seq", "num_experts": 3}),
    ("taser", {"routing": "tok"}),
    ("taser-shared", {}),
    ("desire-me", {"domains": ["Culture", "Science"]}),
    ("rnd-g", {"domains": ["Culture", "Science"]}),
]


@pytest.mark.parametrize(("arch", "options"), ARCHS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(ARCHS)])
def test_save_then_load_gives_identical_embeddings(tiny_checkpoint, tmp_path, arch, options):
    model = create_retriever(arch, tiny_checkpoint, **options)
    folder = model.save_pretrained(tmp_path / "model")
    assert sorted(os.listdir(folder)) == sorted(
        ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    )
    loaded = load_retriever(folder)
    assert type(loaded) is type(model)
    assert loaded.config == model.config
    assert loaded.parameter_count() == model.parameter_count()
    assert loaded.config_fingerprint() == model.config_fingerprint()
    np.testing.assert_array_equal(loaded.encode_questions(QUESTIONS), model.encode_questions(QUESTIONS))
    np.testing.assert_array_equal(loaded.encode_passages(TITLES, TEXTS), model.encode_passages(TITLES, TEXTS))
    # Padding differs with the batch size, which may only move the last float bits.
    np.testing.assert_allclose(
        loaded.encode_passages(TITLES, TEXTS, batch_size=1), model.encode_passages(TITLES, TEXTS), atol=1e-5
    )


def test_config_json_describes_the_architecture(tiny_checkpoint, tmp_path):
    model = create_retriever("taser", tiny_checkpoint, routing="seq")
    folder = model.save_pretrained(tmp_path / "taser")
    config = json.loads((folder / "config.json").read_text())
    assert config["arch"] == "taser"
    assert config["taser"] == {
        "shared_blocks": 2,
        "num_experts": 2,
        "routing": "seq",
        "entropy_beta": 0.01,
        "gumbel_tau": 1.0,
        "specialized_layers": [2],
    }
    assert config["backbone"]["num_hidden_layers"] == 3


def test_fingerprint_changes_with_weights(tiny_checkpoint):
    model = create_retriever("sde", tiny_checkpoint)
    before = model.config_fingerprint()
    with __import__("torch").no_grad():
        next(model.parameters()).add_(1e-3)
    assert model.config_fingerprint() != before


@pytest.mark.parametrize("pickle_name", ["pytorch_model.bin", "optimizer.pt", "extra/state.pkl"])
def test_folder_with_a_pickle_is_refused(tiny_checkpoint, tmp_path, pickle_name):
    folder = create_retriever("sde", tiny_checkpoint).save_pretrained(tmp_path / "model")
    target = folder / pickle_name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"\x80\x04K\x01.")  # pickle of the integer 1
    with pytest.raises(UnsafeCheckpointError, match="pickle"):
        load_retriever(folder)


def test_plain_hf_folder_with_a_pickle_is_refused(tiny_checkpoint, tmp_path):
    folder = tmp_path / "hf"
    shutil.copytree(tiny_checkpoint, folder)
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(UnsafeCheckpointError):
        load_retriever(folder)


def test_plain_hf_checkpoint_is_a_zero_shot_cls_dot_encoder(tiny_checkpoint):
    model = load_retriever(tiny_checkpoint)
    assert (model.arch, model.config.pooling, model.similarity) == ("sde", "cls", "dot")
    assert load_retriever(tiny_checkpoint, pooling="mean").config.pooling == "mean"


def test_minilm_sentence_transformers_folder_uses_its_pooling_and_normalisation():
    model = load_retriever(minilm_path())
    assert (model.arch, model.config.pooling, model.similarity, model.embedding_dim) == (
        "sde",
        "mean",
        "cosine",
        384,
    )
    questions = model.encode_questions(QUESTIONS)
    passages = model.encode_passages(TITLES, TEXTS)
    assert questions.dtype == np.float32 and questions.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(passages, axis=1), 1.0, rtol=1e-5)
    scores = questions @ passages.T
    assert (scores.argmax(axis=1) == [0, 1]).all()  # the pretrained model already ranks correctly
