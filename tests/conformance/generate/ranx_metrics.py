"""fixtures/ranx_metrics.json: ranx's per-question figures for a seeded run with graded judgments.

pip install "ranx>=0.3.19,<0.4"
python tests/conformance/generate/ranx_metrics.py > tests/conformance/fixtures/ranx_metrics.json

What the trec_eval fixture does not hold: graded judgments (0 to 3), questions judged only 0, a
passage listed twice in one ranking, judged questions the run never retrieved for and an unjudged
one it did, cut-offs 1 to 100 over rankings of up to 120 passages. Passage ids are stored as
numbers (passage "d7" is 7) to keep the file small. ranx's `make_comparable` gives the BEIR
convention odqa follows.
"""

import json
import random
import sys

from ranx import Qrels, Run, evaluate

METRICS = (
    "MAP@100",
    "MRR@100",
    "MRR@10",
    "Recall@100",
    "nDCG@10",
    "P@1",
    "nDCG@3",
    "P@5",
    "MAP@5",
    "Recall@5",
)
RANX = {"MAP": "map", "MRR": "mrr", "Recall": "recall", "nDCG": "ndcg", "P": "precision"}

rng = random.Random(41)
run: dict[str, list[int]] = {}
qrels: dict[str, dict[str, int]] = {}
for i in range(120):
    qid = f"q{i}"
    ranking = rng.sample(range(300), rng.randint(0, 120))
    if rng.random() < 0.1:
        ranking += ranking[:3]  # listed twice
    if rng.random() < 0.9:
        run[qid] = ranking
    if rng.random() < 0.05:
        qrels[qid] = {str(d): 0 for d in rng.sample(range(300), 3)}  # judged, none relevant
    elif rng.random() < 0.9:
        qrels[qid] = {str(d): rng.choice([0, 1, 1, 2, 3]) for d in rng.sample(range(300), rng.randint(1, 12))}
run["unjudged"] = [1, 2]

scored = {
    q: {f"d{d}": 1.0 / rank for rank, d in enumerate(ranking, start=1)}
    for q, ranking in run.items()
    if ranking
}
ranx_run = Run.from_dict(scored)
names = {name: f"{RANX[name.split('@')[0]]}@{name.split('@')[1]}" for name in METRICS}
evaluate(
    Qrels.from_dict({q: {f"d{d}": rel for d, rel in judged.items()} for q, judged in qrels.items()}),
    ranx_run,
    list(names.values()),
    make_comparable=True,
)
figures = {
    name: {q: float(v) for q, v in ranx_run.scores[ranx_name].items()} for name, ranx_name in names.items()
}
json.dump({"run": run, "qrels": qrels, "ranx": figures}, sys.stdout, separators=(",", ":"), sort_keys=True)
sys.stdout.write("\n")
