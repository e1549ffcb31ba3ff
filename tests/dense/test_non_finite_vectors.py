"""Vectors with nan or inf are refused: by the encoder before a shard is written, and by the
index build (embeddings written before the encoder checked, or by another tool).

Unchecked, a model whose weights hold nan (a training that diverged) encodes every passage to
nan, FAISS indexes them without a word, the index answers every question with "no passage
matches", and a scheduled re-index releases it.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pytest
import torch
from dense_corpus import as_batches, make_corpus
from dense_minilm import load_minilm

from odqa.pipelines.dense.faiss_index import build_faiss_index
from odqa.pipelines.dense.sharded_encoding import (
    EncodingManifest,
    NonFiniteVectors,
    as_storage,
    encode_corpus,
    read_manifest,
    write_manifest,
    write_shard,
)
from tests.experiments.tiny_encoder import write_tiny_encoder

DIM = 16


def test_a_model_with_nan_weights_writes_no_shard(tmp_path):
    retriever = load_minilm()
    with torch.no_grad():  # what a diverged training leaves: nan in a layer's weights
        retriever.model.encoder.layer[2].output.dense.weight.fill_(float("nan"))
    corpus = make_corpus(12)
    with pytest.raises(NonFiniteVectors, match=r"12 of 12 passage vectors .* not finite numbers \(first: passage "
                       r"'p0+'\): the model's weights or its outputs hold nan"):  # fmt: skip
        encode_corpus(retriever, as_batches(corpus, 12), tmp_path, corpus_fingerprint="c", shard_size=12,
                      batch_size=4, devices=[None], progress=False)  # fmt: skip
    assert not list(tmp_path.glob("shard-*"))
    manifest = read_manifest(tmp_path)
    assert manifest is None or (not manifest.complete and not manifest.shards)


def test_float16_overflow_is_named_as_such():
    ids = pa.array(["a", "b", "c"])
    vectors = np.ones((3, DIM), dtype=np.float32)
    vectors[1, 3] = 1e5  # finite in float32, inf in float16 (max 65504)
    assert as_storage(vectors, "float32", ids) is vectors
    with pytest.raises(NonFiniteVectors, match=r"1 of 3 .*\(first: passage 'b'\): they exceed float16's range"):
        as_storage(vectors, "float16", ids)
    vectors[1, 3] = np.nan
    with pytest.raises(NonFiniteVectors, match="hold nan or inf"):
        as_storage(vectors, "float16", ids)


@pytest.mark.parametrize("index_type", ["flat", "hnsw"])
def test_the_index_build_refuses_stored_nan_vectors(tmp_path, index_type):
    emb = tmp_path / "emb"
    manifest = EncodingManifest("model-a", "corpus-a", 50, DIM, "float32", "dot")
    rng = np.random.default_rng(0)
    for shard in range(2):
        vectors = rng.standard_normal((50, DIM)).astype(np.float32)
        if shard == 1:
            vectors[17, 5] = np.inf if index_type == "flat" else np.nan
        ids = pa.array([f"doc{shard * 50 + row}" for row in range(50)])
        manifest.shards.append(write_shard(emb, shard, ids, vectors))  # (no check: as another tool writes)
    manifest.complete, manifest.num_passages = True, 100
    write_manifest(emb, manifest)
    with pytest.raises(NonFiniteVectors, match=r"shard-00001\.npy: row 17 \(passage 'doc67'\) is not a finite vector"):
        build_faiss_index(emb, tmp_path / "index", index_type=index_type, progress=False)
    assert not (tmp_path / "index").exists()


def _diverged_encoder(folder) -> str:
    """A tiny BERT checkpoint whose first layer's output weights are nan, as a diverged training leaves them."""
    from safetensors.torch import load_file, save_file

    write_tiny_encoder(folder, layers=1)
    weights = load_file(folder / "model.safetensors")
    name = next(n for n in weights if n.endswith("layer.0.output.dense.weight"))
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return str(folder)


def test_a_worker_process_names_the_passage_in_one_line(tmp_path):
    from odqa.models.retriever import load_retriever

    folder = _diverged_encoder(tmp_path / "diverged")
    with pytest.raises(NonFiniteVectors, match=r"^10 of 10 passage vectors of a shard are not finite numbers \(first: "
                       r"passage 'p00000[01]0'\).* \(encoding worker on cpu\)$") as raised:  # fmt: skip
        encode_corpus(load_retriever(folder), as_batches(make_corpus(20), 10), tmp_path / "emb",
                      corpus_fingerprint="c", shard_size=10, batch_size=8, devices=[None, None], progress=False,
                      retriever_factory=functools.partial(load_retriever, folder))  # fmt: skip
    assert "Traceback" not in str(raised.value)
    assert not list((tmp_path / "emb").glob("shard-*"))


@pytest.mark.parametrize("runner", [[], ["--runner", "threads"]], ids=["in-process", "threads-runner"])
def test_odqa_encode_names_the_broken_model_and_indexes_nothing(cli, tmp_path, runner):
    folder = _diverged_encoder(tmp_path / "diverged")
    passages = tmp_path / "passages.tsv"
    passages.write_text("id\ttext\ttitle\n" + "".join(f"{i}\tpassage number {i}\tTitle {i}\n" for i in range(6)))
    workspace = ("-w", str(tmp_path / "ws"))
    cli(*workspace, "import", "passages", "--format", "dpr-tsv", str(passages))
    result = cli(*workspace, "encode", "--model", folder, *runner, ok=False)
    assert result.exit_code == 1, result.output
    error = next(line for line in result.output.splitlines() if line.startswith("odqa: error:"))
    assert f"model {folder!r}" in error and "6 of 6 passage vectors of a shard are not finite numbers" in error
    assert "Traceback" not in result.output
    assert cli(*workspace, "index", "build", "--model", folder, ok=False).exit_code == 1
    assert not list((tmp_path / "ws" / "indexes").glob("dense/*/*/index*"))
