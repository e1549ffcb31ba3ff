"""fixtures/json_loaders.json: what the JSON loaders of DPR, EntityQuestions, SQuAD and NQ-open read.

python tests/conformance/generate/json_loaders.py > tests/conformance/fixtures/json_loaders.json

The reference readings, run here on each case's file:

- `dpr-json` (DPR's retriever training files): `json.load(open(path, "r", encoding="utf-8"))`
  (facebookresearch/DPR, dpr/utils/data_utils.py `read_data_from_json_files`); a sample's
  `question`, `answers` and its `positive_ctxs`' `passage_id`, `title`, `text`;
- `entityquestions` (princeton-nlp/EntityQuestions' `P19.dev.json`): `json.load`, a list of
  `{"question", "answers"}`;
- `squad` (SQuAD v1.1; its evaluate-v1.1.py and Hugging Face's squad script): `json.load(f)["data"]`,
  per question its `id`, `question`, `answers[].text`, and its paragraph's `context` and
  article's `title`;
- `nq-open` (NQ-open's `.jsonl`): `json.loads(line)` for each line of `open(path, encoding="utf-8")`.

Recorded per case: the file's text and the records, or the error the loader stops with.
"""

import json
import sys
import tempfile
from pathlib import Path


def records_dpr_json(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return [{"question": s["question"], "answers": s["answers"],
             "positive_ctxs": [[c["passage_id"], c["title"], c["text"]] for c in s["positive_ctxs"]]} for s in data]  # fmt: skip


def records_entityquestions(path):
    with open(path, encoding="utf-8") as f:
        return [{"question": s["question"], "answers": s["answers"]} for s in json.load(f)]


def records_squad(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    return [{"id": qa["id"], "question": qa["question"], "answers": [a["text"] for a in qa["answers"]],
             "context": paragraph["context"], "title": article.get("title", "")}
            for article in data for paragraph in article["paragraphs"] for qa in paragraph["qas"]]  # fmt: skip


def records_nq_open(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def dpr_sample(question, answers, pid="11", title="T", text="passage"):
    return {"question": question, "answers": answers, "negative_ctxs": [], "hard_negative_ctxs": [],
            "positive_ctxs": [{"title": title, "text": text, "score": 1.0, "passage_id": pid}]}  # fmt: skip


def squad_file(questions, title="Super_Bowl_50", context="The Broncos won Super Bowl 50."):
    return {"version": "1.1", "data": [{"title": title, "paragraphs": [{"context": context, "qas": [
        {"id": f"q{i}", "question": q, "answers": [{"text": a, "answer_start": 0} for a in answers]}
        for i, (q, answers) in enumerate(questions)]}]}]}  # fmt: skip


TRICKY = ('the "Iron Lady" was who', ["Margaret Thatcher", "Thatcher"])
UNICODE = ("cafe\u0301 zero\u200bwidth line\u2028sep \U0001f600", ["caf\u00e9", "\u6771\u4eac"])


def arrays(dump, wrap):
    """The cases every JSON-array format shares; `wrap` turns (question, answers) pairs into the file's value."""
    value = wrap([TRICKY, UNICODE])
    return {
        "quotes, non-ascii, nfd and zero-width": dump(value),
        "ascii escapes": json.dumps(value, ensure_ascii=True),
        "crlf and no final newline": json.dumps(value, indent=1).replace("\n", "\r\n"),
        # The reference departs here; odqa's behaviour for each is in the test (DEPARTURES).
        "byte order mark": "\ufeff" + dump(value),
        "data after the array": dump(wrap([TRICKY])) + "\n" + dump(wrap([UNICODE])),
        # the escape \udc80 (a low surrogate without its high one), written into the file as text
        "unpaired surrogate": dump(wrap([TRICKY, ("Queequeg LONE", ["a"])])).replace("LONE", "\\udc80"),
    }


def compact(value):
    return json.dumps(value, ensure_ascii=False)


CASES = {
    "dpr-json": arrays(compact, lambda qs: [dpr_sample(q, a, pid=str(i + 1)) for i, (q, a) in enumerate(qs)]),
    "entityquestions": arrays(compact, lambda qs: [{"question": q, "answers": a} for q, a in qs]),
    "squad": {name: content for name, content in arrays(compact, squad_file).items() if name != "data after the array"},
    "nq-open": {
        "quotes, non-ascii, nfd and zero-width": "".join(compact({"question": q, "answer": a}) + "\n"
                                                         for q, a in (TRICKY, UNICODE)),  # fmt: skip
        "ascii escapes": "".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in (TRICKY, UNICODE)),
        "crlf and no final newline": compact({"question": "q1", "answer": ["a"]}) + "\r\n"
        + compact({"question": "q2", "answer": ["b"]}),
        # The reference departs here; odqa's behaviour for each is in the test (DEPARTURES).
        "byte order mark": "\ufeff" + compact({"question": "q1", "answer": ["a"]}) + "\n",
        "empty lines": compact({"question": "q1", "answer": ["a"]}) + "\n\n" + compact({"question": "q2", "answer": ["b"]})
        + "\n\n",
        "carriage return between tokens": '{"question": "q1",\r"answer": ["a"]}\n',
        "unpaired surrogate": compact({"question": "q1", "answer": ["a"]}) + '\n{"question": "Queequeg \\udc80", '
        '"answer": ["b"]}\n',
    },
}
# A SQuAD file is one JSON document: json.load refuses a second one after it, as odqa does.
CASES["squad"]["data after the document"] = compact(squad_file([TRICKY])) + "\n" + compact(squad_file([UNICODE]))
READERS = {"dpr-json": records_dpr_json, "entityquestions": records_entityquestions, "squad": records_squad,
           "nq-open": records_nq_open}  # fmt: skip


def read_case(fmt, content):
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "P19.dev.json"
        path.write_bytes(content.encode("utf-8"))
        case = {"content": content}
        try:
            case["records"] = READERS[fmt](path)
        except Exception as exc:  # the loader stops here: recorded as what it raised
            case["error"] = f"{type(exc).__name__}: {exc}"
    return case


json.dump(
    {
        "reference": "json.load / json.loads per line, as each dataset's own loader calls it (see the script)",
        "python": sys.version.split()[0],
        **{fmt: {name: read_case(fmt, content) for name, content in cases.items()} for fmt, cases in CASES.items()},
    },
    sys.stdout,
    indent=1,
    ensure_ascii=True,
)
sys.stdout.write("\n")
