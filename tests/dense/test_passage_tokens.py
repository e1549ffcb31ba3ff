"""Token ids stored once (the passage_tokens table): reuse, invalidation, kill and resume, the
vectors they give, the encode report's counts, and bf16 weights on real passages."""

from __future__ import annotations

import csv
import json
import os
import pickle
import shutil
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

from odqa.pipelines.dense.sharded_encoding import (
    EncodedCorpus,
    encode_corpus,
    encode_tokenized,
    inference_weights,
    tokenize_shard,
)
from odqa.pipelines.dense.stored_tokens import TokenFeed, passage_keys
from odqa.storage.passage_tokens import PassageTokenStore
from tests.experiments.tiny_encoder import minilm_dir, write_tiny_encoder

JOB = Path(__file__).with_name("passage_tokens_job.py")
SQUAD_PASSAGES = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "squad24" / "passages.tsv"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> tuple[str, str]:
    """Two tiny encoders (other weights) sharing MiniLM's tokenizer files."""
    root = tmp_path_factory.mktemp("tiny")
    return write_tiny_encoder(root / "a", layers=1, seed=0), write_tiny_encoder(root / "b", layers=1, seed=1)


def _load(path: str):
    from odqa.models.retriever import load_retriever

    return load_retriever(path)


def _store(ws, retriever) -> PassageTokenStore:
    return PassageTokenStore(ws, retriever.passage_tokenizer().tokenization())


def _encode(retriever, table: pa.Table, out: Path, ws, version: str = "v1"):
    return encode_corpus(retriever, as_batches(table, 13), out, corpus_fingerprint=version, shard_size=40,
                         batch_size=16, devices=[None], progress=False, token_store=_store(ws, retriever),
                         tokenize_workers=0)


def _vectors(folder: Path) -> np.ndarray:
    corpus = EncodedCorpus(folder)
    return corpus.vectors(np.arange(len(corpus)))


def test_second_model_reuses_ids_and_vectors_equal_text_encoding(tmp_path, workspace, tiny_models):
    corpus = make_corpus(90, seed=11, min_words=1, max_words=70)
    first, second = _load(tiny_models[0]), _load(tiny_models[1])
    assert first.passage_tokenizer().tokenization() == second.passage_tokenizer().tokenization()
    result = _encode(first, corpus, tmp_path / "first", workspace)
    assert (result.tokenized, result.tokens_reused) == (90, 0)
    again = _encode(second, corpus, tmp_path / "second", workspace)
    assert (again.tokenized, again.tokens_reused) == (0, 90)
    assert workspace.sql("SELECT count(*) AS n, min(id_width) AS w FROM passage_tokens").to_pylist() == [
        {"n": 90, "w": 2}]  # MiniLM's 30,522 ids fit in uint16
    titles, texts = corpus.column("title").to_pylist(), corpus.column("text").to_pylist()
    from_text = second.encode_passages(titles, texts, batch_size=16, show_progress=False)
    np.testing.assert_allclose(_vectors(tmp_path / "second"), from_text, atol=1e-5)
    found, rows = _store(workspace, second).find(passage_keys(corpus.column("passage_id").to_pylist(), titles, texts))
    assert found.all()
    expected = second.passage_token_rows(titles, texts)
    stored = np.split(rows.input_ids.astype(np.int64), np.cumsum(rows.lengths)[:-1])
    assert [s.tolist() for s in stored] == expected["input_ids"]
    types = np.split(rows.type_ids.astype(np.int64), np.cumsum(rows.lengths)[:-1])
    assert [t.tolist() for t in types] == expected["token_type_ids"]


def _write_passages(ws, corpus: pa.Table) -> None:
    rows = corpus.append_column("article_id", pa.array(range(len(corpus)), pa.int64()))
    with ws.transaction("test-passages") as tx:
        tx.replace_table("passages")
        tx.write("passages", rows.append_column("position", pa.array([0] * len(corpus), pa.int32())), source="test")


def test_encode_report_counts_a_second_model_and_a_reindex(workspace, tiny_models):
    """The encode stage (as index builds, mining and re-indexes run it) reads the stored ids: a
    second model with the same tokenizer tokenizes nothing, changed passages only themselves."""
    from odqa.flows.stages.encode import encode_task
    from odqa.storage.model_registry import resolve_model

    corpus = make_corpus(60, seed=12)
    _write_passages(workspace, corpus)
    first = encode_task.fn(str(workspace.root), resolve_model(workspace, tiny_models[0]), 50_000, 16, "float32", "auto")
    assert (first.tokenized, first.tokens_reused, first.encoded_now) == (60, 0, 60)
    second = encode_task.fn(str(workspace.root), resolve_model(workspace, tiny_models[1]), 50_000, 16, "float32", "auto")
    assert (second.tokenized, second.tokens_reused) == (0, 60)
    texts = corpus.column("text").to_pylist()
    for row in (3, 41):
        texts[row] += " changed"
    _write_passages(workspace, corpus.set_column(corpus.schema.get_field_index("text"), "text", pa.array(texts)))
    reindex = encode_task.fn(str(workspace.root), resolve_model(workspace, tiny_models[0]), 50_000, 16, "float32", "auto")
    assert (reindex.tokenized, reindex.tokens_reused, reindex.encoded_now, reindex.reused) == (2, 0, 2, 58)
    assert workspace.sql("SELECT count(*) AS n FROM passage_tokens").to_pylist() == [{"n": 62}]


def test_tokenizer_files_key_the_ids_not_its_folder(tmp_path, workspace, tiny_models):
    corpus = make_corpus(30, seed=13)
    model = _load(tiny_models[0])
    _encode(model, corpus, tmp_path / "a", workspace)
    moved = tmp_path / "same-files-elsewhere"
    shutil.copytree(tiny_models[0], moved)
    assert (_encode(_load(str(moved)), corpus, tmp_path / "b", workspace).tokenized) == 0
    edited = tmp_path / "cased"
    shutil.copytree(tiny_models[0], edited)
    for name, edit in (("tokenizer.json", lambda spec: spec["normalizer"].update(lowercase=False)),
                       ("tokenizer_config.json", lambda spec: spec.update(do_lower_case=False))):
        spec = json.loads((edited / name).read_text())
        edit(spec)  # the same vocabulary, but other ids for capitals
        (edited / name).write_text(json.dumps(spec))
    cased = _load(str(edited))
    assert cased.passage_tokenizer().fingerprint() != model.passage_tokenizer().fingerprint()
    result = _encode(cased, corpus, tmp_path / "c", workspace)
    assert (result.tokenized, result.tokens_reused) == (30, 0)
    assert workspace.sql("SELECT count(DISTINCT tokenization) AS n FROM passage_tokens").to_pylist() == [{"n": 2}]


def test_killed_tokenize_resumes_without_half_visible_rows(tmp_path, workspace, tiny_models):
    tokenizer = _load(tiny_models[0]).passage_tokenizer()
    pickled = tmp_path / "tokenizer.pickle"
    pickled.write_bytes(pickle.dumps(tokenizer))
    store = PassageTokenStore(workspace, tokenizer.tokenization())
    n, chunk = 200, 20
    job = subprocess.Popen([sys.executable, str(JOB), str(workspace.root), str(pickled), str(n), str(chunk)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and len(store) < 2 * chunk:
            assert job.poll() is None, job.stderr.read().decode()
            time.sleep(0.05)
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    stored = len(store)
    assert 2 * chunk <= stored < n and stored % chunk == 0  # whole committed parts only
    corpus = make_corpus(n, seed=3)
    feed = TokenFeed(tokenizer, store, "v1", workers=0)
    rows, order = feed.rows(corpus.column("passage_id").combine_chunks(), corpus.column("title").to_pylist(),
                            corpus.column("text").to_pylist())
    assert (feed.tokenized, feed.reused) == (n - stored, stored)
    assert len(store) == n
    fresh = tokenizer.encode(corpus.column("title").to_pylist(), corpus.column("text").to_pylist())
    np.testing.assert_array_equal(rows.lengths[order], fresh.lengths)


def test_worker_processes_tokenize_as_the_model_does(tiny_models):
    model = _load(tiny_models[0])
    corpus = make_corpus(50, seed=14, max_words=90)
    titles, texts = corpus.column("title").to_pylist(), corpus.column("text").to_pylist()
    feed = TokenFeed(model.passage_tokenizer(), workers=1)
    feed.pool.min_passages = 1  # through the worker process, however few
    try:
        rows, order = feed.rows(corpus.column("passage_id").combine_chunks(), titles, texts)
    finally:
        feed.close()
    assert feed.tokenized == 50
    expected = model.passage_token_rows(titles, texts)["input_ids"]
    starts = rows.starts[order]
    assert [rows.input_ids[s:s + n].tolist() for s, n in zip(starts, rows.lengths[order], strict=True)] == expected


def test_a_worker_tokenizes_on_its_own_core_whatever_the_parent_asked(tiny_models, monkeypatch):
    """The pool is sized to the cores; a worker's Rust tokenizer must not start a thread per core too."""
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    feed = TokenFeed(_load(tiny_models[0]).passage_tokenizer(), workers=1)
    feed.pool.min_passages = 1
    corpus = make_corpus(3, seed=15, max_words=20)
    try:
        feed.rows(corpus.column("passage_id").combine_chunks(), corpus.column("title").to_pylist(),
                  corpus.column("text").to_pylist())  # fmt: skip
        assert feed.pool._pool.submit(os.getenv, "TOKENIZERS_PARALLELISM").result() == "false"
    finally:
        feed.close()


def _squad_passages(count: int) -> tuple[list[str], list[str]]:
    if not SQUAD_PASSAGES.exists():
        pytest.skip(f"shared data not available: {SQUAD_PASSAGES}")
    with SQUAD_PASSAGES.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))[1:]
    picked = rows[:: len(rows) // count][:count]
    return [r[2] for r in picked], [r[1] for r in picked]


def test_bf16_weights_stay_within_cosine_of_fp32_on_real_passages():
    """bf16 casts a copy's linear layers only (the model keeps its fp32 weights): on real
    passages the vectors stay at cosine >= 0.9999 to fp32."""
    from odqa.models.retriever import load_retriever

    model = load_retriever(minilm_dir())
    titles, texts = _squad_passages(4)
    tokens = tokenize_shard(model, titles, texts)
    fp32 = encode_tokenized(model, tokens, batch_size=4, device=None, precision="fp32")
    bf16 = encode_tokenized(model, tokens, batch_size=4, device=None, precision="bf16")
    assert np.sum(fp32 * bf16, axis=1).min() >= 0.9999
    assert all(p.dtype == torch.float32 for p in model.parameters())
    cast = inference_weights(model, "bf16")
    linears = [m for m in cast.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.dtype == torch.bfloat16 for m in linears)
    assert all(m.weight.dtype == torch.float32 for m in cast.modules() if isinstance(m, torch.nn.LayerNorm))
    assert inference_weights(model, "fp32", "cuda:0") is model and inference_weights(cast, "bf16") is cast


def test_passage_keys_hash_id_title_text_the_same_from_arrow_or_python():
    """The key is BLAKE2b-128 of "id\\0title\\0text\\0" (a missing title as ""), whether the
    columns come as Arrow arrays (the encoder's path) or Python strings (re-index diffs)."""
    import hashlib

    ids, titles, texts = ["p1", "p2", "p3"], ["Zürich", None, ""], ["text one", "two", "ünï\x00code"]
    expected = np.frombuffer(b"".join(
        hashlib.blake2b(f"{i}\x00{t or ''}\x00{x}\x00".encode(), digest_size=16).digest()
        for i, t, x in zip(ids, titles, texts, strict=True)), dtype=np.uint64).reshape(-1, 2)  # fmt: skip
    np.testing.assert_array_equal(passage_keys(ids, titles, texts), expected)
    np.testing.assert_array_equal(passage_keys(pa.array(ids), pa.array(titles, pa.string()), pa.array(texts)), expected)
    assert len({tuple(k) for k in passage_keys(["a", "a"], ["b", ""], ["", "b"])}) == 2  # fields do not run together
