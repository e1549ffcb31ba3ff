"""fixtures/beir_loader.json: what BEIR's GenericDataLoader reads from tricky BEIR folders.

pip install --no-deps --target BEIR_DIR beir==2.2.0   # the loader needs only the standard library and tqdm
PYTHONPATH=BEIR_DIR python tests/conformance/generate/beir_loader.py > tests/conformance/fixtures/beir_loader.json

Each case is a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv). It is read with
`GenericDataLoader(data_folder=FOLDER).load(split="test")`, which reads corpus and queries with
`json.loads` per line and the qrels with `csv.reader(..., delimiter="\\t")` after skipping the
first line (beir/datasets/data_loader.py). Recorded per case: the files' text and the loader's
corpus, queries (those judged in the split) and qrels, or the error it stops with.
"""

import json
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from beir.datasets.data_loader import GenericDataLoader


def line(value):
    return json.dumps(value, ensure_ascii=False) + "\n"


QRELS_HEADER = "query-id\tcorpus-id\tscore\n"
CORPUS = line({"_id": "d1", "title": 'The "Iron Lady"', "text": "Margaret Thatcher\twas \"PM\"."}) + line(
    {"_id": "d2", "title": "cafe\u0301", "text": "zero\u200bwidth, line\u2028sep, \u6771\u4eac \U0001f600"})
QUERIES = line({"_id": "q1", "text": 'who was the "Iron Lady"'}) + line({"_id": "q2", "text": "cafe\u0301 \u200b?"}) + line(
    {"_id": "q3", "text": "not judged"})
QRELS = QRELS_HEADER + "q1\td1\t1\nq2\td2\t2\nq2\td1\t0\n"

CASES = {
    "quotes, tabs, non-ascii, nfd and zero-width": {"corpus.jsonl": CORPUS, "queries.jsonl": QUERIES,
                                                    "qrels/test.tsv": QRELS},
    "ascii escapes": {"corpus.jsonl": "".join(json.dumps(json.loads(x)) + "\n" for x in CORPUS.split("\n") if x),
                      "queries.jsonl": QUERIES, "qrels/test.tsv": QRELS},
    "crlf and no final newline": {"corpus.jsonl": CORPUS.replace("\n", "\r\n")[:-2],
                                  "queries.jsonl": QUERIES.replace("\n", "\r\n")[:-2],
                                  "qrels/test.tsv": QRELS.replace("\n", "\r\n")[:-2]},
    "csv-quoted qrels ids": {"corpus.jsonl": line({"_id": 'd"1', "title": "", "text": "a"}) + line(
        {"_id": "d2", "title": "", "text": "b"}), "queries.jsonl": line({"_id": "q1", "text": "a"}) + line(
        {"_id": "q2", "text": "b"}), "qrels/test.tsv": QRELS_HEADER + '"q1"\t"d""1"\t1\n"q"2\t"d"2\t1\n'},
    "integer ids, no title": {"corpus.jsonl": line({"_id": 7, "text": "seven"}) + line({"_id": "8", "title": None,
                              "text": "eight"}), "queries.jsonl": line({"_id": "q1", "text": "a"}),
                              "qrels/test.tsv": QRELS_HEADER + "q1\t7\t1\nq1\t8\t1\n"},
    "extra qrels columns": {"corpus.jsonl": CORPUS, "queries.jsonl": QUERIES,
                            "qrels/test.tsv": QRELS_HEADER + "q1\td1\t1\tnote\n"},
    # The reference departs here; odqa's behaviour for each is in the test (DEPARTURES).
    "byte order mark": {"corpus.jsonl": "\ufeff" + CORPUS, "queries.jsonl": QUERIES, "qrels/test.tsv": QRELS},
    "empty lines": {"corpus.jsonl": CORPUS.replace("\n", "\n\n"), "queries.jsonl": QUERIES.replace("\n", "\n\n"),
                    "qrels/test.tsv": QRELS.replace("\n", "\n\n")},
    "qrels without a header": {"corpus.jsonl": CORPUS, "queries.jsonl": QUERIES, "qrels/test.tsv": QRELS[len(QRELS_HEADER):]},
    "qrels names a query queries.jsonl lacks": {"corpus.jsonl": CORPUS, "queries.jsonl": QUERIES,
                                                "qrels/test.tsv": QRELS + "q9\td1\t1\n"},
    "text null": {"corpus.jsonl": CORPUS + line({"_id": "d3", "title": "Queequeg", "text": None}),
                  "queries.jsonl": QUERIES, "qrels/test.tsv": QRELS},
    "qrels quote left open": {"corpus.jsonl": CORPUS, "queries.jsonl": QUERIES,
                              "qrels/test.tsv": QRELS_HEADER + 'q1\t"d1\t1\nq2\td2"\t2\n'},
}


def read_case(files):
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for name, content in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(content.encode("utf-8"))
        case = {"files": files}
        try:
            corpus, queries, qrels = GenericDataLoader(data_folder=str(folder)).load(split="test")
            case["records"] = {"corpus": corpus, "queries": queries, "qrels": qrels}
        except Exception as exc:  # the loader stops here: recorded as what it raised
            case["error"] = f"{type(exc).__name__}: {exc}"
    return case


json.dump(
    {
        "reference": f"beir {version('beir')} GenericDataLoader.load('test')",
        "python": sys.version.split()[0],
        "beir": {name: read_case(files) for name, files in CASES.items()},
    },
    sys.stdout,
    indent=1,
    ensure_ascii=True,
)
sys.stdout.write("\n")
