"""Sharded encoding with one worker process per device, and bf16 compute precision."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from dense_corpus import as_batches, make_corpus
from dense_minilm import load_minilm

from odqa.pipelines.dense.sharded_encoding import EncodedCorpus, encode_corpus
from odqa.storage.passage_tokens import PassageTokenStore
from tests.experiments.tiny_encoder import write_tiny_encoder


@pytest.fixture(scope="module")
def retriever():
    return load_minilm()


def _vectors(folder) -> np.ndarray:
    return EncodedCorpus(folder).vectors(np.arange(len(EncodedCorpus(folder))))


@pytest.mark.slow
def test_worker_processes_match_in_process_encoding(tmp_path, workspace):
    """Two worker processes (CPU stands in for two GPUs) give the in-process result, and get
    their tokens from the passage_tokens table the in-process run filled: none tokenized again."""
    from odqa.models.retriever import load_retriever

    model = load_retriever(write_tiny_encoder(tmp_path / "tiny", layers=1))
    corpus = make_corpus(60, seed=4, max_words=12)
    store = PassageTokenStore(workspace, model.passage_tokenizer().tokenization())
    kwargs = dict(corpus_fingerprint="c", shard_size=10, batch_size=8, progress=False, token_store=store,
                  tokenize_workers=0)
    first = encode_corpus(model, as_batches(corpus, 7), tmp_path / "one", devices=[None], **kwargs)
    assert (first.tokenized, first.tokens_reused) == (60, 0)
    result = encode_corpus(model, as_batches(corpus, 7), tmp_path / "two", devices=[None, None],
                           retriever_factory=functools.partial(load_retriever, str(tmp_path / "tiny")), **kwargs)
    assert result.encoded_passages == 60 and result.manifest.complete
    assert (result.tokenized, result.tokens_reused) == (0, 60)
    assert [s.index for s in result.manifest.shards] == list(range(6))
    assert EncodedCorpus(tmp_path / "two").ids().to_pylist() == corpus.column("passage_id").to_pylist()
    np.testing.assert_allclose(_vectors(tmp_path / "two"), _vectors(tmp_path / "one"), atol=1e-6)
    with pytest.raises(ValueError, match="several devices need retriever_factory"):
        encode_corpus(model, as_batches(corpus, 7), tmp_path / "three", devices=[None, None], **kwargs)


def test_bf16_precision_is_recorded_close_and_restarts(tmp_path, retriever):
    corpus = make_corpus(24, seed=6)
    kwargs = dict(corpus_fingerprint="c", shard_size=12, batch_size=8, devices=[None], progress=False)
    fp32 = encode_corpus(retriever, as_batches(corpus, 5), tmp_path / "a", **kwargs)
    assert fp32.manifest.precision == "fp32"  # auto on CPU
    bf16 = encode_corpus(retriever, as_batches(corpus, 5), tmp_path / "a2", precision="bf16", **kwargs)
    assert bf16.manifest.precision == "bf16"
    cosine = np.sum(_vectors(tmp_path / "a") * _vectors(tmp_path / "a2"), axis=1)
    assert cosine.min() > 0.999
    again = encode_corpus(retriever, as_batches(corpus, 5), tmp_path / "a", precision="bf16", **kwargs)
    assert "precision fp32 -> bf16" in again.restart_reason
    with pytest.raises(ValueError, match="fp16 encoding needs a GPU"):
        encode_corpus(retriever, as_batches(corpus, 5), tmp_path / "b", precision="fp16", **kwargs)
    assert not (tmp_path / "b").exists()
