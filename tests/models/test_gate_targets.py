"""`--gate-targets positive`: DESIRE-ME's gate learns the domains of the positive passage the
example trains on (the reference code's `dataloader.py`), not the union over all the question's
positives (the default, as the paper's "categories of the query")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from odqa.flows.stages.train import load_examples_task
from odqa.models.data import collate, read_examples
from odqa.models.desire_me_targets import check_gate_targets
from odqa.models.retriever import create_retriever, load_retriever
from odqa.storage import Workspace

from .conftest import TOY_DOMAINS, TOY_FACTS

TRAIN = 6  # questions 0..5; question i has positives p_i (its example's positive) and p_(i+1)


def _domains_of(index: int) -> list[str]:
    return [TOY_DOMAINS[index % TRAIN]]


def _workspace(root: Path) -> Workspace:
    order = ["Culture", "Geography", "Science"]
    passages = [{"passage_id": f"p{i}", "article_id": i, "title": title, "text": text, "position": 0}
                for i, (_, _, title, text) in enumerate(TOY_FACTS[:TRAIN])]  # fmt: skip
    # The labeller writes MediaWiki titles: underscores, which meet the passages' spaces.
    labels = [{"title": title.replace(" ", "_"), "domain": TOY_DOMAINS[i], "depth": 1}
              for i, (_, _, title, _) in enumerate(TOY_FACTS[:TRAIN])]  # fmt: skip
    questions = []
    for i, (question, answer, _, _) in enumerate(TOY_FACTS[:TRAIN]):
        union = sorted({*_domains_of(i), *_domains_of(i + 1)}, key=order.index)
        questions.append({"question_id": f"toy-{i}", "dataset": "toy", "split": "train", "question": question,
                          "answers": [answer], "positive_ids": [f"p{i}", f"p{(i + 1) % TRAIN}"],
                          "hard_negative_ids": [], "domains": union})  # fmt: skip
    ws = Workspace.resolve(root)
    with ws.transaction("toy-data") as tx:
        tx.write("passages", passages, source="toy")
        tx.write("questions", questions, source="toy")
        tx.write("domains", labels, source="toy")
    return ws


def test_positive_targets_are_the_trained_positives_domains(tiny_checkpoint, tmp_path):
    ws = _workspace(tmp_path / "ws")
    loaded = {}
    for choice in ("question", "positive"):
        path = tmp_path / f"{choice}.parquet"
        load_examples_task.fn(str(ws.root), "toy", "train", str(path), 0, choice)
        loaded[choice] = read_examples(path)
    for i, (union, single) in enumerate(zip(loaded["question"], loaded["positive"], strict=True)):
        assert union.positive_id == single.positive_id == f"p{i}"
        assert len(union.domains) == 2 and set(union.domains) >= set(single.domains)
        assert list(single.domains) == _domains_of(i)
    # What the gate's BCE is computed against: two ones per row by default, one with `positive`.
    domains = ["Culture", "Geography", "Science"]
    model = create_retriever("desire-me", tiny_checkpoint, domains=domains)
    targets = {c: collate(model, e, 0, seed=0, domains=domains).domain_targets for c, e in loaded.items()}
    assert targets["question"].sum(dim=1).tolist() == [2.0] * TRAIN
    expected = torch.zeros(TRAIN, len(domains))
    for i in range(TRAIN):
        expected[i, domains.index(_domains_of(i)[0])] = 1.0
    torch.testing.assert_close(targets["positive"], expected)


def test_the_cli_option_reaches_training(cli, tiny_checkpoint, tmp_path):
    ws = _workspace(tmp_path / "ws")
    common = ["--workspace", str(ws.root), "train", "--train", "toy:train", "--max-steps", "1", "--batch-size", "3",
              "--hard-negatives", "0", "--arch", "desire-me", "--base", tiny_checkpoint, "--model-id", "dme"]  # fmt: skip
    cli(*common)
    union = load_retriever(ws.models_dir / "dme")
    assert "no-op" not in cli(*common, "--gate-targets", "positive").output  # it enters the fingerprint
    assert "no-op" in cli(*common, "--gate-targets", "positive").output
    single = load_retriever(ws.models_dir / "dme")
    assert single.domains == union.domains == ["Culture", "Geography", "Science"]
    # Same seed and batches: the gate learnt other targets; the specialisers, which learn from the
    # contrastive loss only (the gate's weights are detached), did not change.
    assert not torch.equal(single.gate.layers[0].weight, union.gate.layers[0].weight)
    for a, b in zip(single.specializers.parameters(), union.specializers.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="desire-me"):
        check_gate_targets("sde", "positive")
    with pytest.raises(ValueError, match="one of"):
        check_gate_targets("desire-me", "random")
