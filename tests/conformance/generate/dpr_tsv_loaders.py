"""fixtures/dpr_tsv_loaders.json: what DPR's loaders read from tricky DPR TSV files.

python tests/conformance/generate/dpr_tsv_loaders.py > tests/conformance/fixtures/dpr_tsv_loaders.json

DPR reads both of its tab-separated formats with the standard library's csv module
(facebookresearch/DPR, dpr/data/retriever_data.py):

- `*.qas.csv` / `.tsv` (`CsvQASrc.load_data`): `with open(file) as ifile: reader =
  csv.reader(ifile, delimiter="\\t")`, then per row `question = row[0]`, `answers = eval(row[1])`
  and, when an id column is configured, `id = row[id_col]`;
- psgs_w100.tsv (`CsvCtxSrc.load_data_to`): the same reader; a row whose id column is "id" (the
  header) is skipped, and the passage is `row[0]` (id), `row[1]` (text), `row[2]` (title).

This script writes each case's file and reads it exactly that way: `open(path, encoding="utf-8")`
(DPR's `open(file)` under a UTF-8 locale, universal newlines) and `csv.reader(f, delimiter="\\t")`.
Answers go through `ast.literal_eval` (`python_literals.literal_eval`), which gives what DPR's `eval` gives for every literal (and
refuses code). Recorded per case: the file's text, the reader's rows, and the records, or the
error DPR's loader stops with. DPR's later preprocessing (`normalize_question`: ’ to ';
`CsvCtxSrc`: `.strip('"')` of the text) is not reading and is not applied.
"""

import csv
import json
import sys
import tempfile
from pathlib import Path

from odqa.pipelines.questions.python_literals import literal_eval

PRIESTLEY = '"An Account of Further Discoveries in Air" was published by who in 1775?\t["Joseph Priestley"]\n'

QAS_CASES = {
    # A field that starts with a quote which closes before the field ends: the rest follows unquoted.
    "leading quoted title": PRIESTLEY + "who discovered oxygen\t['Joseph Priestley', 'Carl Wilhelm Scheele']\n",
    "quote closed mid-field, then another quote": '"a"b"c\t[\'x\']\n"Dune" and "Emma"\t[\'y\']\n',
    "embedded quotes": 'who sang "let it be"\t[\'The Beatles\']\nthe "Iron Lady" was who\t["Margaret Thatcher"]\n',
    "doubled quotes in a quoted field": '"the ""Iron Lady"" was who"\t[\'Margaret Thatcher\']\n',
    "tab inside a quoted field": '"a question\twith a tab"\t[\'x\']\nnext\t[\'y\']\n',
    "csv-quoted answers": 'who\t"[""a"", ""b c""]"\nwhat\t"[\'d\', \'e\']"\n',
    "single-quoted answers with apostrophes": (
        "what was rowling's first novel\t[\"Harry Potter and the Philosopher's Stone\", 'O\\'Neil']\n"
        "who\t['a \"quoted\" b', 'c']\n"
    ),
    "python escapes in answers": "q1\t['caf\\xe9', '\\u00e9t\\u00e9', 'tab\\there']\nq2\t[\"\\N{BULLET} x\"]\n",
    "json answers": 'q1\t["a", "b\\"c"]\nq2\t["\\u00e9"]\nq3\t[]\n',
    "whitespace around fields": "  padded question  \t  ['a']  \n",
    "repeated answers": "q\t['a', 'b', 'a']\n",
    "id column": "q1\t['a']\tid-7\nq2\t['b']\tid-8\n",
    "crlf line ends": "q1\t['a']\r\n\"q2 \"\"quoted\"\"\"\t['b']\r\nq3\t['c']\r\n",
    "no final newline": "q1\t['a']\nq2\t['b']",
    "non-ascii, nfd and zero-width": (
        "qui était Marie Curie\t['physicienne']\n"
        "cafe\u0301 au lait\t['cafe\u0301']\n"
        "zero\u200bwidth\u200djoiner\t['\u200b']\n"
        "line\u2028separator and next\u0085line\t['\u00e9']\n"
        "東京はどこ\t['日本']\n"
    ),
    # The reference departs here; odqa's behaviour for each is in the test (DEPARTURES).
    "byte order mark": "\ufeffq1\t['a']\nq2\t['b']\n",
    "empty lines": "q1\t['a']\n\nq2\t['b']\n\n",
    "json escapes python reads otherwise": 'q1\t["AC\\/DC"]\nq2\t["\\ud83d\\ude00"]\n',
    "unpaired surrogate": 'q1\t["a"]\nQueequeg\t["\\udc80"]\n',
    "quote left open merges the next lines": "q1\t['a']\n\"Moby Dick opens a quote\t['b']\nq3\"\t['c']\nq4\t['d']\n",
    "carriage return inside a line": "q1\t['a']\nIshmael\r\t['b']\n",
}

TSV_HEADER = "id\ttext\ttitle\n"
PASSAGE_CASES = {
    "leading quoted title": TSV_HEADER + '1\t"Dune" is a novel by Frank Herbert.\tDune (novel)\n2\tplain text\t"Emma"\n',
    "csv-quoted like psgs_w100": TSV_HEADER + '1\t"Aaron ( or ; ""Ahärôn"") is a prophet"\tAaron\n'
    '2\t"He said ""yes"""\t"Quoted ""title"""\n',
    "tab inside a quoted field": TSV_HEADER + '1\t"text\twith a tab"\t"title\twith a tab"\n',
    "embedded quotes": TSV_HEADER + '1\ta "b" c\td "e"\n2\tx"\ty\n',
    "crlf line ends": TSV_HEADER.replace("\n", "\r\n") + '1\t"a"\tA\r\n2\tb\tB\r\n',
    "no final newline": TSV_HEADER + "1\ta\tA\n2\tb\tB",
    "non-ascii, nfd and zero-width": TSV_HEADER + "1\tcafe\u0301\u200b\tCafe\u0301\n2\t東京\t東京\n3\tnext\u0085line\tU\u2028\n",
    # The reference departs here; odqa's behaviour for each is in the test (DEPARTURES).
    "byte order mark": "\ufeff" + TSV_HEADER + "1\ta\tA\n",
    "empty line": TSV_HEADER + "1\ta\tA\n\n2\tb\tB\n",
    "four fields": TSV_HEADER + "1\ta\tA\textra\n",
    "quote left open merges the next lines": TSV_HEADER + '1\t"Pequod\tA\n2\tb"\tB\n3\tc\tC\n',
    "carriage return inside a line": TSV_HEADER + "1\tStarbuck\rb\tA\n",
}


def dpr_rows(path: Path) -> list[list[str]]:
    """The rows of DPR's reader: `csv.reader(open(file), delimiter="\\t")`."""
    with open(path, encoding="utf-8") as ifile:
        return list(csv.reader(ifile, delimiter="\t"))


def qas_records(rows: list[list[str]]) -> list[dict]:
    """CsvQASrc's samples: question row[0], answers eval(row[1]), id row[2] (when present)."""
    return [{"question": row[0], "answers": literal_eval(row[1]), "id": row[2] if len(row) > 2 else None}
            for row in rows]  # fmt: skip


def passage_records(rows: list[list[str]]) -> list[dict]:
    """CsvCtxSrc's passages: rows whose id is "id" skipped; id, text, title from columns 0, 1, 2."""
    return [{"id": row[0], "text": row[1], "title": row[2]} for row in rows if row[0] != "id"]


def read_case(content: str, records) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "case.tsv"
        path.write_bytes(content.encode("utf-8"))
        rows = dpr_rows(path)
    case = {"content": content, "rows": rows}
    try:
        case["records"] = records(rows)
    except Exception as exc:  # the loader stops here: recorded as what it raised
        case["error"] = f"{type(exc).__name__}: {exc}"
    return case


json.dump(
    {
        "reference": "csv.reader(open(path, encoding='utf-8'), delimiter='\\t') as DPR's CsvQASrc / CsvCtxSrc call it",
        "python": sys.version.split()[0],
        "dpr-qas": {name: read_case(content, qas_records) for name, content in QAS_CASES.items()},
        "dpr-tsv": {name: read_case(content, passage_records) for name, content in PASSAGE_CASES.items()},
    },
    sys.stdout,
    indent=1,
    ensure_ascii=True,
)
sys.stdout.write("\n")
