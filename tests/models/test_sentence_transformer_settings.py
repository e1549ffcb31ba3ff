"""Pooling and normalisation read from sentence-transformers folders, old and new config styles."""

from __future__ import annotations

import json

import pytest

from odqa.models.backbone import sentence_transformer_settings


def _folder(tmp_path, pooling: dict, normalize: bool = True):
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"}]  # fmt: skip
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.base.modules.normalize.Normalize"})  # fmt: skip
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return tmp_path


@pytest.mark.parametrize(
    ("pooling", "expected"),
    [
        ({"word_embedding_dimension": 384, "pooling_mode_mean_tokens": True}, "mean"),  # sentence-transformers < 5
        ({"word_embedding_dimension": 384, "pooling_mode_cls_token": True}, "cls"),
        ({"embedding_dimension": 384, "pooling_mode": "mean", "include_prompt": True}, "mean"),  # 5 and later
        ({"embedding_dimension": 384, "pooling_mode": "cls"}, "cls"),
    ],
)
def test_pooling_of_old_and_new_sentence_transformers_folders(tmp_path, pooling, expected):
    settings = sentence_transformer_settings(_folder(tmp_path, pooling))
    assert settings.pooling == expected and settings.normalize


def test_unsupported_pooling_is_refused_with_the_file(tmp_path):
    with pytest.raises(ValueError, match="1_Pooling/config.json: unsupported pooling"):
        sentence_transformer_settings(_folder(tmp_path, {"pooling_mode": "max"}, normalize=False))
