"""Small input files for the CLI and the Prefect server/UI tests: a few made-up passages (DPR TSV)
and questions with their answers that those passages hold."""

from __future__ import annotations

import json
from pathlib import Path

PASSAGES = [
    ("1", "Zorbania is a landlocked country. Its longest river is the Quellor.", "Zorbania"),
    ("2", "Vexland has a small capital called Morvil near the coast.", "Vexland"),
    ("3", "The composer Ilsa Brandt wrote the opera Glass Tides in 1911.", "Ilsa Brandt"),
    ("4", "Farnwick is known for its copper mines and its blue granite.", "Farnwick"),
    ("5", "Bread rises because yeast produces carbon dioxide.", "Bread"),
]
QUESTIONS = [
    ("What is the longest river of Zorbania?", ["Quellor"]),
    ("What is the capital of Vexland?", ["Morvil"]),
    ("Which composer wrote the opera Glass Tides?", ["Ilsa Brandt"]),
]


def write_passages(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    """`rows` (id, text, title) as a DPR TSV file with its header."""
    path.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\t{h}\n" for i, t, h in rows), encoding="utf-8")
    return path


def write_questions(path: Path) -> Path:
    """QUESTIONS as a DPR QA CSV file: the question, a tab, its answers as a JSON list."""
    path.write_text("".join(f"{q}\t{json.dumps(a)}\n" for q, a in QUESTIONS), encoding="utf-8")
    return path
