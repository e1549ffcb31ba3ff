"""`--passage-input joined-lowercase`: a passage reaches the tokenizer as one lowercased
"title text" string, as DESIRE-ME's reference code embeds passages, instead of DPR's pair."""

from __future__ import annotations

import json

import numpy as np
import pytest

from odqa.models.config import RetrieverConfig
from odqa.models.retriever import create_retriever, load_retriever

TITLES, TEXTS = ["Paris"], ["Paris Is The Capital Of France."]


def test_joined_lowercase_tokenizes_one_lowercased_string(tiny_checkpoint):
    joined = create_retriever("sde", tiny_checkpoint, passage_input="joined-lowercase")
    inputs = joined.tokenize_passages(TITLES, TEXTS)
    expected = joined.tokenizer(["paris paris is the capital of france."], return_tensors="pt")
    assert inputs["input_ids"].tolist() == expected["input_ids"].tolist()
    assert set(inputs["token_type_ids"].reshape(-1).tolist()) == {0}  # one segment, no pair
    assert joined.passage_token_rows(TITLES, TEXTS)["input_ids"] == expected["input_ids"].tolist()
    pair = create_retriever("sde", tiny_checkpoint)
    assert 1 in pair.tokenize_passages(TITLES, TEXTS)["token_type_ids"].reshape(-1).tolist()


def test_the_option_changes_the_vectors_and_survives_saving(tiny_checkpoint, tmp_path):
    pair = create_retriever("sde", tiny_checkpoint)
    joined = create_retriever("sde", tiny_checkpoint, passage_input="joined-lowercase")  # same weights
    v_pair = pair.encode_passages(TITLES, TEXTS, show_progress=False)
    v_joined = joined.encode_passages(TITLES, TEXTS, show_progress=False)
    assert not np.allclose(v_pair, v_joined, atol=1e-3)
    # The question side is untouched.
    np.testing.assert_array_equal(pair.encode_questions(["x?"], show_progress=False),
                                  joined.encode_questions(["x?"], show_progress=False))  # fmt: skip
    joined.save_pretrained(tmp_path / "joined")
    again = load_retriever(tmp_path / "joined")
    assert again.config.passage_input == "joined-lowercase"
    np.testing.assert_allclose(again.encode_passages(TITLES, TEXTS, show_progress=False), v_joined, atol=1e-6)


def test_default_configs_do_not_change(tiny_checkpoint):
    """Configs saved before the option existed stay byte-identical (fingerprints stay valid)."""
    pair = create_retriever("sde", tiny_checkpoint)
    assert "passage_input" not in json.loads(pair.config.to_json())
    with pytest.raises(ValueError, match="passage_input"):
        RetrieverConfig(arch="sde", base="x", passage_input="joined").validate()


def test_desire_me_takes_the_option_on_its_passage_side(tiny_checkpoint):
    model = create_retriever("desire-me", tiny_checkpoint, domains=["A", "B"], passage_input="joined-lowercase")
    base = create_retriever("sde", tiny_checkpoint, passage_input="joined-lowercase")
    np.testing.assert_allclose(model.encode_passages(TITLES, TEXTS, show_progress=False),
                               base.encode_passages(TITLES, TEXTS, show_progress=False), atol=1e-6)  # fmt: skip
