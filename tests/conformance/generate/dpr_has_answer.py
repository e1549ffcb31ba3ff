"""fixtures/dpr_has_answer.json from facebookresearch/DPR's own code: `SimpleTokenizer`
(dpr/utils/tokenizers.py) and `has_answer`, `_normalize`, `regex_match` taken from
dpr/data/qa_validation.py (the rest of that module needs DPR's whole package).

    python tests/conformance/generate/dpr_has_answer.py DPR_CHECKOUT > tests/conformance/fixtures/dpr_has_answer.json
"""

import ast
import json
import pathlib
import random
import sys
import types
import unicodedata

import regex as re

dpr_root = pathlib.Path(sys.argv[1])
sys.modules["spacy"] = types.ModuleType("spacy")  # imported by tokenizers.py, used only by SpacyTokenizer
sys.path.insert(0, str(dpr_root))
from dpr.utils.tokenizers import SimpleTokenizer  # noqa: E402

src = (dpr_root / "dpr/data/qa_validation.py").read_text()
tree = ast.parse(src)
ns = {"re": re, "unicodedata": unicodedata}
for node in tree.body:
    if isinstance(node, ast.FunctionDef) and node.name in ("has_answer", "_normalize", "regex_match"):
        exec(compile(ast.Module([node], []), "qa_validation.py", "exec"), ns)
tok = SimpleTokenizer()
cases = [
    ("Paris is the capital of France.", ["paris"], "string"),
    ("The Parisian metro.", ["Paris"], "string"),
    ("He served in the U.S. Army.", ["U.S."], "string"),
    ("He served in the U.S. Army.", ["U.S"], "string"),
    ("He served in the U.S. Army.", ["US"], "string"),
    ("Le Caf\u00e9 de Flore", ["Cafe\u0301"], "string"),
    ("Le Cafe\u0301 de Flore", ["Caf\u00e9"], "string"),
    ("Le Caf\u00e9 de Flore", ["Cafe"], "string"),
    ("a well-known fact", ["well - known"], "string"),
    ("a well-known fact", ["well known"], "string"),
    ("to co\u00adoperate fully", ["cooperate"], "string"),
    ("to co\u00adoperate fully", ["co operate"], "string"),
    ("zero\u200bwidth", ["zero width"], "string"),
    ("New\u00a0York City", ["new york"], "string"),
    ("New\nYork\tCity", ["New York"], "string"),
    ("\u0130stanbul is large", ["istanbul"], "string"),
    ("\u0130stanbul is large", ["\u0130STANBUL"], "string"),
    ("Stra\u00dfe 5", ["STRASSE"], "string"),
    ("\u039f\u0394\u039f\u03a3 street", ["\u03bf\u03b4\u03bf\u03c2"], "string"),
    ("about 1,000 people", ["1,000"], "string"),
    ("about 1,000 people", ["1000"], "string"),
    ("\u6771\u4eac\u90fd is Tokyo", ["\u6771\u4eac"], "string"),
    ("\u6771\u4eac \u90fd", ["\u6771\u4eac"], "string"),
    ("Fish & chips", ["fish&chips"], "string"),
    ("x\u2044y and \u00bd", ["\u00bd"], "string"),
    ("\u2460 first", ["\u2460"], "string"),
    ("Nothing here", ["Paris", "here"], "string"),
    ("Nothing here", ["Paris", "London"], "string"),
    ("It ends with a dot...", ["..."], "string"),
    ("It ends with a dot.", ["..."], "string"),
    ("Any passage at all", [""], "string"),
    ("Any passage at all", ["   "], "string"),
    ("Any passage at all", ["\u200b"], "string"),
    ("Any passage at all", ["", "Paris"], "string"),
    ("", ["Paris"], "string"),
    ("Paris is the capital of France.", ["par.s"], "regex"),
    ("Paris is the capital of France.", ["^PARIS"], "regex"),
    ("The capital\nParis", ["^paris$"], "regex"),
    ("Paris is the capital of France.", ["London|Paris"], "regex"),
    ("Paris is the capital of France.", ["(unclosed"], "regex"),
    ("Le Caf\u00e9", ["Cafe\u0301"], "regex"),
    ("Le Caf\u00e9", ["Caf\u00e9"], "regex"),
]
rng = random.Random(29)
pool = list("aAbBzZ09 .,-'&/") + [
    "\u00e9",
    "e\u0301",
    "\u0130",
    "\u00df",
    "\u03a3",
    "\u00a0",
    "\u200b",
    "\u00ad",
    "\u2044",
    "\u00bd",
    "\u6771",
    "\u0301",
    "\n",
    "\t",
    "\u2028",
    "\u00c5",
    "A\u030a",
    "\ufb01",
    "\u2460",
    "\u0663",
]
for _ in range(200):
    text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 24)))
    if text and rng.random() < 0.7:
        start = rng.randrange(len(text))
        answer = text[start : start + rng.randint(1, 8)]
        answer = answer.upper() if rng.random() < 0.3 else answer
    else:
        answer = "".join(rng.choice(pool) for _ in range(rng.randint(1, 5)))
    cases.append((text, [answer], "string"))
out = []
for text, answers, mode in cases:
    dpr = bool(ns["has_answer"](answers, text, tok, mode))
    row = {"passage": text, "answers": answers, "mode": mode, "dpr": dpr}
    if mode == "string":
        blank = [a for a in answers if not tok.tokenize(ns["_normalize"](a)).words(uncased=True)]
        if blank:
            row["blank_answers"] = blank
            row["dpr_without_blank_answers"] = bool(
                ns["has_answer"]([a for a in answers if a not in blank], text, tok, mode)
            )
    out.append(row)
json.dump(out, sys.stdout, ensure_ascii=True, indent=1)
