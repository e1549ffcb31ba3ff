"""Sharded corpus encoding: resume after SIGKILL, skip when complete, restart on change."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from dense_corpus import as_batches, make_corpus
from dense_minilm import MiniLMRetriever, load_minilm, minilm_dir

from odqa.pipelines.dense.sharded_encoding import (
    MANIFEST_NAME,
    EncodedCorpus,
    encode_corpus,
    encode_shard,
    iter_corpus_shards,
    read_manifest,
    token_batches,
    tokenize_shard,
)

N, SHARD = 160, 16
JOB = Path(__file__).resolve().parent / "dense_encode_job.py"


@pytest.fixture(scope="module")
def retriever() -> MiniLMRetriever:
    return load_minilm()


@pytest.fixture(scope="module")
def corpus() -> pa.Table:
    return make_corpus(N)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, retriever, corpus) -> EncodedCorpus:
    out = tmp_path_factory.mktemp("reference")
    result = encode_corpus(retriever, as_batches(corpus, 7), out, corpus_fingerprint=f"synthetic-{N}",
                           shard_size=SHARD, batch_size=8, devices=[None], progress=False)
    assert result.encoded_passages == N and not result.skipped
    return EncodedCorpus(out)


def _all_vectors(encoded: EncodedCorpus) -> np.ndarray:
    return np.concatenate([np.asarray(s.vectors, dtype=np.float32) for s in encoded.iter_shards()])


def test_reference_layout(reference, corpus):
    manifest = reference.manifest
    assert manifest.complete and manifest.num_passages == N and manifest.dim == 384
    assert [s.index for s in manifest.shards] == list(range(N // SHARD))
    assert reference.ids().to_pylist() == corpus.column("passage_id").to_pylist()
    assert manifest.shards[3].first_id == "p0000048" and manifest.shards[3].last_id == "p0000063"
    assert not list(reference.dir.glob("*.tmp"))
    vectors = _all_vectors(reference)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    rows = np.array([[5, 150], [0, 119]])
    np.testing.assert_array_equal(reference.vectors(rows), vectors[rows])


def test_killed_encode_resumes_to_identical_embeddings(tmp_path, retriever, corpus, reference):
    out = tmp_path / "emb"
    job = subprocess.Popen([sys.executable, str(JOB), str(out), str(N), str(SHARD)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            manifest = read_manifest(out) if (out / MANIFEST_NAME).exists() else None
            if manifest is not None and len(manifest.shards) >= 2:
                break
            assert job.poll() is None, job.stderr.read().decode()
            time.sleep(0.02)
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    killed = read_manifest(out)
    assert killed is not None and not killed.complete
    finished = len(killed.shards)
    assert 2 <= finished < N // SHARD

    result = encode_corpus(retriever, as_batches(corpus, 7), out, corpus_fingerprint=f"synthetic-{N}",
                           shard_size=SHARD, batch_size=8, devices=[None], progress=False)
    assert result.restart_reason is None and not result.skipped
    assert result.encoded_passages == N - sum(s.count for s in killed.shards)  # resumed, not restarted
    resumed = EncodedCorpus(out)
    assert resumed.ids().to_pylist() == reference.ids().to_pylist()
    np.testing.assert_allclose(_all_vectors(resumed), _all_vectors(reference), rtol=0, atol=1e-6)
    assert json.loads((out / MANIFEST_NAME).read_text())["complete"] is True


def _never_read():
    raise AssertionError("a complete encoding must not read the corpus again")
    yield  # pragma: no cover


def test_complete_encoding_is_skipped(retriever, reference):
    result = encode_corpus(retriever, _never_read(), reference.dir, corpus_fingerprint=f"synthetic-{N}",
                           shard_size=SHARD, batch_size=8, devices=[None], progress=False)
    assert result.skipped and result.encoded_passages == 0


def test_changed_model_or_corpus_starts_over(tmp_path, retriever, caplog):
    small = make_corpus(30, seed=1)
    out = tmp_path / "emb"
    kwargs = dict(shard_size=10, batch_size=8, devices=[None], progress=False)
    encode_corpus(retriever, as_batches(small, 9), out, corpus_fingerprint="snapshot-a", **kwargs)
    before = _all_vectors(EncodedCorpus(out))

    changed = make_corpus(30, seed=2)
    with caplog.at_level(logging.WARNING):
        result = encode_corpus(retriever, as_batches(changed, 9), out, corpus_fingerprint="snapshot-b", **kwargs)
    assert result.encoded_passages == 30 and "(corpus snapshot-a -> snapshot-b)" in result.restart_reason
    assert "discarding 3 shard(s)" in caplog.text
    assert EncodedCorpus(out).manifest.corpus_fingerprint == "snapshot-b"
    assert not np.allclose(_all_vectors(EncodedCorpus(out)), before)

    other_model = MiniLMRetriever(max_length=8)  # truncation changes every long passage's vector
    result = encode_corpus(other_model, as_batches(changed, 9), out, corpus_fingerprint="snapshot-b", **kwargs)
    assert result.encoded_passages == 30
    assert re.search(r"do not match \(model [0-9a-f]{12} -> [0-9a-f]{12}\);", result.restart_reason)
    assert EncodedCorpus(out).manifest.model_fingerprint == other_model.config_fingerprint()


def test_length_sorted_batches_restore_input_order(retriever):
    table = make_corpus(24, seed=3, min_words=1, max_words=60)
    titles, texts = table.column("title").to_pylist(), table.column("text").to_pylist()
    sorted_batches = encode_shard(retriever, titles, texts, batch_size=6, device=None)
    one_by_one = np.concatenate([retriever.encode_passages([a], [b], batch_size=1) for a, b in zip(titles, texts, strict=True)])
    np.testing.assert_allclose(sorted_batches, one_by_one, atol=1e-5)


@pytest.fixture(scope="module")
def models_retriever():
    """The ``models/`` retriever of the same checkpoint: token-level, so the shard is tokenized once."""
    from odqa.models.retriever import load_retriever

    return load_retriever(minilm_dir())


class ProtocolOnly:
    """The same model seen only through ``encode_passages`` (the character-sorted path)."""

    def __init__(self, inner) -> None:
        self.inner, self.embedding_dim, self.similarity = inner, inner.embedding_dim, inner.similarity

    def encode_passages(self, titles, texts, batch_size=64, device=None):
        return self.inner.encode_passages(titles, texts, batch_size=batch_size, device=device)

    def config_fingerprint(self) -> str:
        return self.inner.config_fingerprint()


def test_token_batches_follow_real_token_counts(models_retriever):
    table = make_corpus(30, seed=4, min_words=1, max_words=60)
    titles, texts = table.column("title").to_pylist(), table.column("text").to_pylist()
    tokens = tokenize_shard(models_retriever, titles, texts)
    assert tokens is not None and tokenize_shard(ProtocolOnly(models_retriever), titles, texts) is None
    direct = models_retriever.tokenize_passages(titles, texts)
    np.testing.assert_array_equal(tokens.lengths, direct["attention_mask"].sum(1).numpy())
    batches = token_batches(tokens.lengths, 7)
    assert sorted(np.concatenate(batches).tolist()) == list(range(30)) and [len(b) for b in batches] == [7] * 4 + [2]
    budgeted = token_batches(np.array([10, 50, 20, 50, 5]), 4, max_tokens=100)
    assert [b.tolist() for b in budgeted] == [[1, 3], [2, 0, 4]]  # 2 x 50 tokens, then 3 x 20
    assert [b.tolist() for b in token_batches(np.array([300, 8]), 4, max_tokens=100)] == [[0], [1]]
    ordered = np.concatenate([tokens.lengths[b] for b in batches])
    assert (np.diff(ordered) <= 0).all()  # longest first, so padding is at most the spread inside a batch
    for positions in batches[:2]:
        expected = models_retriever.tokenize_passages([titles[i] for i in positions], [texts[i] for i in positions])
        got = tokens.batch(positions)
        assert set(got) == set(expected) and all(torch.equal(got[k], expected[k]) for k in expected)


def test_token_level_path_equals_the_eager_fp32_vectors(tmp_path, models_retriever):
    """Tokenized-once, token-sorted encoding gives the vectors of the plain encode_passages path."""
    table = make_corpus(48, seed=5, min_words=1, max_words=80)
    kwargs = dict(corpus_fingerprint="mixed", shard_size=20, batch_size=8, devices=[None], progress=False)
    encode_corpus(models_retriever, as_batches(table, 11), tmp_path / "tokens", **kwargs)
    encode_corpus(ProtocolOnly(models_retriever), as_batches(table, 11), tmp_path / "protocol", **kwargs)
    fast, plain = _all_vectors(EncodedCorpus(tmp_path / "tokens")), _all_vectors(EncodedCorpus(tmp_path / "protocol"))
    assert np.min(np.sum(fast * plain, axis=1)) >= 0.9999
    np.testing.assert_allclose(fast, plain, atol=1e-5)
    titles, texts = table.column("title").to_pylist()[:5], table.column("text").to_pylist()[:5]
    one_by_one = np.concatenate([models_retriever.encode_passages([a], [b], batch_size=1)
                                 for a, b in zip(titles, texts, strict=True)])
    np.testing.assert_allclose(fast[:5], one_by_one, atol=1e-5)


def test_float16_storage(tmp_path, retriever, reference, corpus):
    first = corpus.slice(0, 40)
    encode_corpus(retriever, as_batches(first, 16), tmp_path, corpus_fingerprint="half", shard_size=SHARD,
                  batch_size=8, dtype="float16", devices=[None], progress=False)
    half = EncodedCorpus(tmp_path)
    assert half.shard(0).vectors.dtype == np.float16
    np.testing.assert_allclose(half.vectors(np.arange(40)), reference.vectors(np.arange(40)), atol=2e-3)


def test_bad_input_names_the_position():
    good = make_corpus(10)
    with pytest.raises(ValueError, match=r"record batch 1 \(corpus rows 5\.\.9\) lacks column\(s\) \['text'\]"):
        list(iter_corpus_shards([good.slice(0, 5), good.slice(5).drop_columns(["text"])], 4))
    ids = good.column("passage_id").to_pylist()
    ids[7] = None
    broken = good.set_column(0, "passage_id", pa.array(ids, pa.string()))
    with pytest.raises(ValueError, match="corpus row 7: null passage_id"):
        list(iter_corpus_shards(as_batches(broken, 5), 4))
    shards = list(iter_corpus_shards(as_batches(good, 3), 4))
    assert [(i, t.num_rows) for i, t in shards] == [(0, 4), (1, 4), (2, 2)]


def test_incomplete_directory_is_refused_for_reading(tmp_path):
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        EncodedCorpus(tmp_path)
    assert os.listdir(tmp_path) == []
