"""fixtures/trec_eval.json: trec_eval's figures (pytrec_eval, trec_eval's own C code) for a small seeded run.

python tests/conformance/generate/trec_eval.py > tests/conformance/fixtures/trec_eval.json
"""

import json
import random
import sys

import pytrec_eval

rng = random.Random(2926)
run, qrels = {}, {}
for q in range(8):
    qid = f"q{q}"
    docs = [f"d{rng.randrange(10**6):06d}" for _ in range(130)]
    docs = list(dict.fromkeys(docs))[: rng.choice([5, 40, 120, 125])]
    run[qid] = docs
    pick = {0: [], 1: [0], 2: [3, 11], 3: [9, 10, 99], 4: [15, 60, 101], 5: [100], 6: [1, 2, 4]}.get(q, [])
    rel = {docs[i]: 1 for i in pick if i < len(docs)}
    rel[f"x{q}a"] = 1  # a relevant passage the run never retrieved
    if q % 2:
        rel[f"x{q}b"] = 1
    if q == 7:
        rel[docs[0]] = 0  # judged non-relevant at rank 1
        rel[docs[2]] = 1
    qrels[qid] = rel
measures = {"recip_rank", "ndcg_cut_3", "ndcg_cut_10", "recall_100", "map_cut_100", "P_1"}
scored = {q: {d: 1.0 / r for r, d in enumerate(ds, 1)} for q, ds in run.items()}
full = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(scored)


def mrr_at(k):  # trec_eval's recip_rank has no cut-off: the run is cut at k first
    top = {q: {d: s for d, s in ds.items() if s >= 1 / k - 1e-12} for q, ds in scored.items()}
    return pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top)


names = {
    "nDCG@3": "ndcg_cut_3",
    "nDCG@10": "ndcg_cut_10",
    "Recall@100": "recall_100",
    "MAP@100": "map_cut_100",
    "P@1": "P_1",
}
expected = {ours: {q: full[q][theirs] for q in run} for ours, theirs in names.items()}
for k in (10, 100):
    cut = mrr_at(k)
    expected[f"MRR@{k}"] = {q: cut[q]["recip_rank"] for q in run}
json.dump(
    {
        "run": run,
        "qrels": qrels,
        "trec_eval": expected,
        "measures": {
            **names,
            "MRR@10": "recip_rank of the run cut at 10",
            "MRR@100": "recip_rank of the run cut at 100",
        },
    },
    sys.stdout,
    indent=1,
    sort_keys=True,
)
