"""Encoding on a CUDA device gives the vectors a CPU gives (cosine within 1e-3).

Covers the two paths a GPU user takes: `Retriever.encode_*` (search, dev evaluation) in full
precision, and the corpus encoder `encode_corpus` with its GPU default (bf16 autocast) and fp16.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from odqa.models.retriever import create_retriever
from odqa.pipelines.dense.sharded_encoding import EncodedCorpus, encode_corpus

from .conftest import requires_cuda

pytestmark = requires_cuda

WORDS = (
    "hamlet",
    "tragedy",
    "written",
    "william",
    "shakespeare",
    "paris",
    "capital",
    "largest",
    "city",
    "france",
    "mars",
    "red",
    "planet",
    "mona",
    "lisa",
    "painted",
    "leonardo",
    "vinci",
    "pacific",
    "ocean",
    "earth",
    "penicillin",
    "discovered",
    "alexander",
    "fleming",
    "water",
    "boils",
    "degrees",
    "celsius",
    "sea",
    "level",
    "neil",
    "armstrong",
    "walked",
    "moon",
    "apollo",
)


def _corpus(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=int(k))) for k in rng.integers(5, 120, size=n)]
    titles = [" ".join(rng.choice(WORDS, size=2)).title() for _ in range(n)]
    return pa.table({"passage_id": [f"p{i:05d}" for i in range(n)], "title": titles, "text": texts})


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _encoded(retriever, corpus: pa.Table, out, device: str | None, precision: str) -> np.ndarray:
    encode_corpus(retriever, corpus.to_batches(max_chunksize=50), out, corpus_fingerprint="gpu-test",
                  shard_size=100, batch_size=32, devices=[device], precision=precision, progress=False)  # fmt: skip
    return np.concatenate([np.asarray(s.vectors, dtype=np.float32) for s in EncodedCorpus(out).iter_shards()])


@pytest.mark.parametrize("arch", ["sde", "dpr", "taser"])
def test_retriever_encodes_the_same_on_gpu(minilm_sized_checkpoint, arch):
    torch.manual_seed(0)
    model = create_retriever(arch, minilm_sized_checkpoint)
    corpus = _corpus(64)
    titles, texts = corpus["title"].to_pylist(), corpus["text"].to_pylist()
    questions = [f"who {t.lower()}" for t in titles]
    cpu_q = model.encode_questions(questions, device="cpu", show_progress=False)
    cpu_p = model.encode_passages(titles, texts, device="cpu", show_progress=False)
    gpu_q = model.encode_questions(questions, device="cuda", show_progress=False)
    gpu_p = model.encode_passages(titles, texts, device="cuda", show_progress=False)
    assert _cosines(cpu_q, gpu_q).min() >= 1 - 1e-3
    assert _cosines(cpu_p, gpu_p).min() >= 1 - 1e-3


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_corpus_encoding_on_gpu_matches_cpu(minilm_sized_checkpoint, tmp_path, precision):
    torch.manual_seed(0)
    model = create_retriever("sde", minilm_sized_checkpoint)
    corpus = _corpus(300)
    cpu = _encoded(model, corpus, tmp_path / "cpu", None, "fp32")
    gpu = _encoded(model, corpus, tmp_path / precision, "cuda", precision)
    assert gpu.shape == cpu.shape and np.isfinite(gpu).all()
    assert _cosines(cpu, gpu).min() >= 1 - 1e-3
