"""A workspace filled with the toy facts of tests/models/conftest.py, for the tests that train on
it (training flow, Sentence-Transformers export, writer locks) or export it (BEIR)."""

from __future__ import annotations

from pathlib import Path

from odqa.storage import Workspace
from tests.models.conftest import TOY_DOMAINS, TOY_FACTS


def fill_workspace(root: Path, negatives: bool = True) -> None:
    """A workspace at `root` with the toy facts: a positive and a filler passage per fact, the questions
    split train (the first 6) / dev, each with its domain, plus one train question whose positive is
    nowhere. With `negatives`, each question names its filler (and a missing id) as hard negatives;
    without, the filler repeats the question so that BM25 mining finds it."""
    passages, questions = [], []
    for index, (question, answer, title, text) in enumerate(TOY_FACTS):
        passages.append(
            {"passage_id": f"p{index}", "article_id": index, "title": title, "text": text, "position": 0}
        )
        passages.append(
            {
                "passage_id": f"n{index}",
                "article_id": 100 + index,
                "title": "Filler",
                # without stored negatives, BM25 must find this one: it repeats the question, not the answer
                "text": f"An unrelated passage number {index}." + ("" if negatives else f" It asks: {question}"),
                "position": 0,
            }
        )
        questions.append(
            {
                "question_id": f"toy-{index}",
                "dataset": "toy",
                "split": "train" if index < 6 else "dev",
                "question": question,
                "answers": [answer],
                "positive_ids": [f"p{index}"],
                "hard_negative_ids": [f"n{index}", "missing-passage"] if negatives else [],
                "domains": [TOY_DOMAINS[index]],
            }
        )
    questions.append(
        {
            "question_id": "toy-x",
            "dataset": "toy",
            "split": "train",
            "question": "Orphan?",
            "answers": ["x"],
            "positive_ids": ["nowhere"],
            "hard_negative_ids": [],
            "domains": [],
        }
    )
    ws = Workspace.resolve(root)
    with ws.transaction("toy-data") as tx:
        tx.write("passages", passages, source="toy")
        tx.write("questions", questions, source="toy")
