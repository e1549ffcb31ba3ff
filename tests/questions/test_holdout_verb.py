"""`odqa questions holdout`: a training split carved into `<split>-fit` and `<split>-tune` copies
(positives and hard negatives kept, the split itself untouched), a no-op when nothing changed,
and a split of the same name that the holdout did not make is refused."""

from __future__ import annotations

import json
from pathlib import Path

from tests.ops.input_files import PASSAGES, write_passages


def _write_dpr_json(path: Path, count: int) -> Path:
    """`count` questions about the five passages, each with its positive."""
    path.write_text(json.dumps([{"question": f"Question {n} about {title}?", "answers": [title],
                                 "positive_ctxs": [{"passage_id": pid, "title": title, "text": text}]}
                                for n in range(count) for pid, text, title in [PASSAGES[n % len(PASSAGES)]]]),
                    encoding="utf-8")  # fmt: skip
    return path


def _splits(ws: Path) -> dict[str, tuple[int, int]]:
    from odqa.storage import Workspace

    rows = Workspace.resolve(ws).sql("SELECT split, count(*) AS n, count(*) FILTER (WHERE len(positive_ids) > 0) AS p "
                                     "FROM questions GROUP BY split").to_pylist()  # fmt: skip
    return {row["split"]: (row["n"], row["p"]) for row in rows}


def test_holdout_makes_fit_and_tune_copies_once_and_refuses_a_foreign_split(cli, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    w = ("-w", str(ws))
    cli(*w, "import", "passages", "--format", "dpr-tsv", str(write_passages(tmp_path / "p.tsv", PASSAGES)))
    cli(*w, "import", "questions", "--format", "dpr-json", "--dataset", "toy", "--split", "train",
        str(_write_dpr_json(tmp_path / "train.json", 40)))  # fmt: skip

    out = cli(*w, "questions", "holdout", "--dataset", "toy", "--split", "train", "--fraction", "0.25").output
    splits = _splits(ws)
    fit, tune = splits["train-fit"], splits["train-tune"]
    assert splits["train"] == (40, 40) and fit[0] + tune[0] == 40 and 0 < tune[0] < 20, splits
    assert fit[1] == fit[0] and tune[1] == tune[0]  # every copy keeps its positive
    assert "questions holdout: done" in out and f"tune_questions: {tune[0]}" in out and "None" not in out, out
    again = cli(*w, "questions", "holdout", "--dataset", "toy", "--split", "train", "--fraction", "0.25").output
    assert "questions holdout: no-op" in again and _splits(ws) == splits

    cli(*w, "import", "questions", "--format", "dpr-json", "--dataset", "toy", "--split", "dev",
        str(_write_dpr_json(tmp_path / "dev.json", 5)))  # fmt: skip
    refused = cli(*w, "questions", "holdout", "--dataset", "toy", "--split", "train", "--tune-split", "dev", ok=False)
    assert refused.exit_code == 1 and "toy:dev already holds 5 questions" in refused.output, refused.output
    assert _splits(ws) == {**splits, "dev": (5, 5)}  # nothing written
