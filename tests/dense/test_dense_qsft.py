"""Query-side fine-tuning: eq. 5.2, and a real retriever learning against a fixed index."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pyarrow as pa
import pytest
import torch
from dense_corpus import as_batches, make_corpus
from dense_minilm import minilm_dir

from odqa.pipelines.dense.divergence import TrainingDiverged
from odqa.pipelines.dense.faiss_index import build_faiss_index, open_faiss_index
from odqa.pipelines.dense.qsft import QsftConfig, qsft_loss, query_side_finetune
from odqa.pipelines.dense.sharded_encoding import EncodedCorpus, encode_corpus


def test_loss_is_eq_5_2_over_questions_with_a_positive():
    scores = torch.tensor([[1.0, 2.0, 3.0], [0.0, 5.0, 1.0], [4.0, 4.0, 4.0]], requires_grad=True)
    positive = torch.tensor([[False, True, True], [False, False, False], [True, False, False]])
    loss, used = qsft_loss(scores, positive)
    row0 = -math.log((math.exp(2) + math.exp(3)) / (math.exp(1) + math.exp(2) + math.exp(3)))
    row2 = -math.log(1 / 3)
    assert used == 2 and loss.item() == pytest.approx((row0 + row2) / 2, rel=1e-6)
    loss.backward()
    assert torch.all(scores.grad[1] == 0)  # no positive: no signal
    zero, none = qsft_loss(scores, torch.zeros_like(positive))
    assert none == 0 and zero.item() == 0.0


ANSWERS = ["volcano", "harbour", "glacier", "orchard", "lighthouse", "canyon"]


def _fixed_index(tmp_path):
    """MiniLM, a 120-passage corpus with three passages per answer word, its encoded vectors
    and flat index; the questions (two per answer) and the passages' texts."""
    from odqa.models.retriever import load_retriever

    torch.manual_seed(0)
    torch.set_num_threads(1)
    retriever = load_retriever(minilm_dir())
    corpus = make_corpus(120, seed=5, max_words=15)
    texts = corpus.column("text").to_pylist()
    for i, word in enumerate(ANSWERS):  # three passages per answer
        for j in (i, i + 40, i + 80):
            texts[j] = f"{texts[j]} {word}"
    corpus = corpus.set_column(2, "text", pa.array(texts))
    emb, idx = tmp_path / "emb", tmp_path / "idx"
    encode_corpus(retriever, as_batches(corpus, 50), emb, corpus_fingerprint="qsft-corpus", shard_size=60,
                  batch_size=16, devices=[None], progress=False)
    build_faiss_index(emb, idx, progress=False)
    index = open_faiss_index(idx, retriever.config_fingerprint(), "qsft-corpus")
    questions = [f"which place has a {w} nearby" for w in ANSWERS] + [f"tell me about the {w}" for w in ANSWERS]
    passage_texts = dict(zip(corpus.column("passage_id").to_pylist(), texts, strict=True))
    return retriever, emb, index, questions, passage_texts


def test_question_tower_learns_against_a_fixed_index(tmp_path):
    retriever, emb, index, questions, passage_texts = _fixed_index(tmp_path)
    stored = EncodedCorpus(emb)
    before = hashlib.sha256((emb / stored.manifest.shards[0].vectors_file).read_bytes()).hexdigest()
    gold = [[w] for w in ANSWERS] * 2
    result = query_side_finetune(
        retriever, index, stored.vectors, questions, gold, passage_texts,
        QsftConfig(epochs=3, batch_size=6, learning_rate=5e-5, warmup_steps=0, top_k=20, progress=False),
    )
    assert result.steps == 6
    assert result.answerable[0] > 0.5
    assert result.epoch_losses[-1] < 0.8 * result.epoch_losses[0], result.epoch_losses
    assert hashlib.sha256((emb / stored.manifest.shards[0].vectors_file).read_bytes()).hexdigest() == before
    assert not retriever.training
    # The tuned question vectors rank answer-bearing passages higher than before.
    q = retriever.encode_questions(questions)
    _, ids = index.search(q, 3)
    hits = np.mean([any(w in passage_texts[p] for p in row) for row, (w,) in zip(ids, gold, strict=True)])
    assert hits >= result.answerable[0]


def test_a_diverging_fine_tuning_stops_instead_of_searching_with_nan_vectors(tmp_path):
    # An lr of 1e30 throws the weights to ~1e30 in one AdamW step; their squares overflow
    # float32 in LayerNorm, so the next question vectors are nan: a real divergence, not an
    # injected one. Unchecked, the index answers nan vectors with no positive passage, every
    # later batch is skipped as "without positive", and the run ends with a model.
    retriever, emb, index, questions, passage_texts = _fixed_index(tmp_path)
    config = QsftConfig(epochs=3, batch_size=6, learning_rate=1e30, warmup_steps=0, top_k=20, progress=False)
    expected = r"diverged at step [2-6] of 6: (the loss is nan|the question vectors are no longer finite).*--lr \(now 1e\+30\)"
    with pytest.raises(TrainingDiverged, match=expected):
        query_side_finetune(retriever, index, EncodedCorpus(emb).vectors, questions, [[w] for w in ANSWERS] * 2,
                            passage_texts, config)  # fmt: skip
    assert all(torch.isfinite(p).all() for p in retriever.parameters())
    assert not retriever.training
