"""Build ``sample/own-data/``: the README's "your own data" files, from the project's own sample.

Why this script exists: the README's *Your own data* walkthrough (run by
``tests/docs/test_readme.py``) imports files in the formats a user brings (DPR's
``psgs_w100.tsv`` layout and DPR's training JSON). They are made here from the bundled sample
only, whose text was written for this project (see ``sample/README.md``), so no third-party
text enters the repository:

- passages: the 100-word passages of the sample's articles (``sample/wiki/src``, the same
  prose view and split as ``build_sample.py``), numbered 1..N in page-id order;
- questions: one per Wikidata fact of ``sample_facts.py`` (the EntityQuestions template of its
  relation, filled with the subject) and the PAQ questions, each about one article;
  answers are the object's label and aliases (PAQ: its answer);
- positives: the passages of the question's article that contain an answer string (a question
  with none is left out);
- split by article: every fourth article (sorted by title, hashed) goes to dev, so the dev
  articles are unseen in training.

Usage::

    python sample/build_own_data.py          # regenerate sample/own-data/ in place
    python sample/build_own_data.py --check  # exit 1 if a committed file is stale

Deterministic: the same sources give identical bytes.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import io
import json
import sys
import tempfile
from pathlib import Path

SAMPLE_DIR = Path(__file__).resolve().parent
OUT_DIR = SAMPLE_DIR / "own-data"
FILES = ("passages.tsv", "train.dpr.json", "dev.dpr.json")


def _load_build_sample():
    spec = importlib.util.spec_from_file_location("odqa_build_sample", SAMPLE_DIR / "build_sample.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["odqa_build_sample"] = module
    spec.loader.exec_module(module)
    return module


def is_dev(title: str) -> bool:
    return hashlib.sha256(title.encode("utf-8")).digest()[0] % 4 == 0


def build(out_dir: Path) -> None:
    bs = _load_build_sample()
    facts = bs.facts
    articles = list(bs.articles(bs.read_sources()))
    passages: list[tuple[int, str, str]] = []  # (id, text, title)
    by_title: dict[str, list[tuple[int, str, str]]] = {}
    title_of_page: dict[int, str] = {}
    for page in articles:
        title_of_page[page.page_id] = page.title
        for text in bs.passages(page.text):
            row = (len(passages) + 1, text, page.title)
            passages.append(row)
            by_title.setdefault(page.title, []).append(row)

    candidates: list[tuple[str, str, list[str]]] = []  # (title, question, answers)
    for subject, relation, objects in facts.FACTS:
        template = facts.RELATION_TEMPLATES[relation]
        for obj in objects:
            answers = [obj, *sorted(facts.ENTITIES[obj][1])]
            candidates.append((subject, template.replace("[X]", subject), answers))
    for question, answer, sources, _subsets, _score in facts.PAQ:
        page_id = int(sources[0][0].split("_")[0])
        if page_id in title_of_page:
            candidates.append((title_of_page[page_id], question[0].upper() + question[1:] + "?", [answer]))

    splits: dict[str, list[dict]] = {"train": [], "dev": []}
    seen: set[str] = set()
    for title, question, answers in candidates:
        key = question.lower().rstrip("?")
        if key in seen or title not in by_title:
            continue
        positives = [row for row in by_title[title] if any(a in row[1] for a in answers)]
        if not positives:
            continue
        seen.add(key)
        splits["dev" if is_dev(title) else "train"].append(
            {
                "question": question,
                "answers": answers,
                "positive_ctxs": [{"title": t, "text": text, "passage_id": str(pid)} for pid, text, t in positives],
                "negative_ctxs": [],
                "hard_negative_ctxs": [],
            }
        )

    out_dir.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(["id", "text", "title"])
    writer.writerows(passages)
    (out_dir / "passages.tsv").write_text(buffer.getvalue(), encoding="utf-8")
    for split, records in splits.items():
        text = json.dumps(records, indent=1, ensure_ascii=False) + "\n"
        (out_dir / f"{split}.dpr.json").write_text(text, encoding="utf-8")
    print(
        f"own-data: {len(passages)} passages of {len(articles)} articles; "
        f"{len(splits['train'])} train questions, {len(splits['dev'])} dev questions "
        f"({sum(is_dev(a.title) for a in articles)} dev articles)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file is stale")
    args = parser.parse_args(argv)
    if not args.check:
        build(OUT_DIR)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        stale = [n for n in FILES if (Path(tmp) / n).read_bytes() != (OUT_DIR / n).read_bytes()]
    for name in stale:
        print(f"stale: sample/own-data/{name}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
