"""The one way from a model to a searcher (`models.searchers`): its choices declared once, its
refusals, and its encoder cache (loaded once, again when the model is saved anew, bounded)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odqa.models.searchers import EncoderCache, RetrieverChoice
from odqa.storage.choices import INDEX_TYPES, RETRIEVER_KINDS
from tests.experiments.tiny_encoder import write_tiny_encoder


def test_the_cli_the_flows_and_the_service_take_the_declared_choices() -> None:
    from prefect.utilities.callables import parameter_schema

    from odqa.flows.cli.groups import INDEX_TYPES as CLI_INDEX_TYPES
    from odqa.flows.cli.groups import RETRIEVER_CHOICES
    from odqa.flows.stages.mine import mine_flow
    from odqa.flows.stages.retrieve import retrieve_flow

    assert tuple(CLI_INDEX_TYPES) == INDEX_TYPES == ("flat", "hnsw", "ivfpq")
    assert tuple(RETRIEVER_CHOICES) == RETRIEVER_KINDS == ("bm25", "dense", "hybrid")
    form = parameter_schema(retrieve_flow.fn).model_dump()["properties"]
    assert form["retriever"]["enum"] == list(RETRIEVER_KINDS) and form["index_type"]["enum"] == list(INDEX_TYPES)
    assert parameter_schema(mine_flow.fn).model_dump()["properties"]["index_type"]["enum"] == list(INDEX_TYPES)


def test_a_choice_refuses_what_it_cannot_open() -> None:
    with pytest.raises(ValueError, match="unknown retriever 'sparse'; available: bm25, dense, hybrid"):
        RetrieverChoice("sparse")  # type: ignore[arg-type]
    for kind in ("dense", "hybrid"):
        with pytest.raises(ValueError, match=f"the {kind} retriever needs a model"):
            RetrieverChoice(kind)  # type: ignore[arg-type]
    assert RetrieverChoice("dense", "some-model").index_type == "flat"


def test_the_encoder_cache_loads_once_again_when_saved_and_keeps_its_limit(tmp_path: Path) -> None:
    first = write_tiny_encoder(tmp_path / "first", layers=1, hidden=16)
    second = write_tiny_encoder(tmp_path / "second", layers=1, hidden=16, seed=1)
    cache = EncoderCache(limit=1)
    loaded = cache.get(first)
    assert cache.get(first) is loaded  # the same object: loaded once
    assert loaded.fingerprint == loaded.model.config_fingerprint()
    weights = Path(first) / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000))  # saved anew
    reloaded = cache.get(first)
    assert reloaded is not loaded
    other = cache.get(second)
    assert cache.get(second) is other and cache.get(first) is not reloaded  # limit 1: the first was dropped
