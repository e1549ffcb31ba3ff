"""Tab-separated lines as the field's loaders read them, one record a line.

DPR reads psgs_w100.tsv and its `*.qas.csv` files with `csv.reader(open(path), delimiter="\\t")`
(dpr/data/retriever_data.py), and BEIR reads its qrels with the same reader. odqa reads each
line into exactly the fields that reader gives for it: a field that starts with a quote is
quoted (`"a ""b"" c"` is `a "b" c`, a tab inside it is text), and where such a quote closes
before the field ends the rest of the field follows unquoted, so the question
`"An Account of Further Discoveries in Air" was published by who in 1775?` reads as
`An Account of Further Discoveries in Air was published by who in 1775?`, as in DPR.

Two things the reference does silently are refused, naming the file and line (`TsvLineError`,
the caller adds where): a quoted field still open at the end of its line, which csv.reader would
continue into the following lines (merging them into one record), and a carriage return inside
a line, where DPR's text-mode file would end the line. Neither message quotes the line.

`quoting="none"` reads raw lines instead (`--quoting none`): the line without its `\\n` or
`\\r\\n`, split at every tab, quotes being plain text. That is the reading for files whose
quotes were never csv-quoted (a question file written with `print(q, answers, sep="\\t")`).
"""

from __future__ import annotations

import csv
import sys
from typing import cast

from ..storage.choices import QUOTINGS, Quoting

# The formats with a tab-separated file, which `quoting` applies to.
TSV_PASSAGE_FORMATS = ("dpr-tsv",)
TSV_QUESTION_FORMATS = ("dpr-qas", "beir")  # beir: its qrels
NOT_CSV_QUOTED = ("if the file's quotes are plain text (it was not written with csv quoting), read it as raw lines, "
                  "split at tabs only, with --quoting none")  # fmt: skip

csv.field_size_limit(sys.maxsize)  # callers bound each line (their --max-record-bytes) before it gets here


class TsvLineError(ValueError):
    """A line csv.reader would not read as one record; the message says why, without the line."""


def line_body(line: str) -> str:
    """`line` without its line end (`\\n` or `\\r\\n`; the last line may have none)."""
    if line.endswith("\r\n"):
        return line[:-2]
    return line[:-1] if line.endswith("\n") else line


def tsv_fields(line: str, quoting: Quoting = "csv") -> list[str]:
    """The tab-separated fields of one line (with or without its line end); `[]` for an empty line.

    `csv`: the fields `csv.reader(f, delimiter="\\t")` reads from this line, refused
    (`TsvLineError`) where that reader would read on into the next line. `none`: the line split
    at every tab.
    """
    body = line_body(line)
    if quoting == "none":
        return body.split("\t") if body else []
    if "\r" in body:
        raise TsvLineError("a carriage return inside the line (lines end with \\n or \\r\\n): csv.reader in a text-mode "
                           "file, as DPR and BEIR read, would end the line there and split its record")  # fmt: skip
    # The reader is given the line and a second, empty one: had the line left a quoted field open,
    # the reader reads on into that second line, as it would into the file's next one.
    reader = csv.reader((body + "\n", "\n"), delimiter="\t")
    fields = next(reader, [])
    if reader.line_num > 1:
        raise TsvLineError("a field opens a quote that this line does not close: csv.reader (DPR's and BEIR's reader) "
                           "would read on into the following lines and merge them into this record. A quoted "
                           f'field ends with a quote (a quote inside it is doubled: "a ""b"" c"); {NOT_CSV_QUOTED}')  # fmt: skip
    return fields


def check_quoting(quoting: str, fmt: str, tab_separated: tuple[str, ...]) -> Quoting:
    """`quoting` when it is one of QUOTINGS and `fmt` has a tab-separated file it applies to."""
    if quoting not in QUOTINGS:
        raise ValueError(f"unknown --quoting {quoting!r}; expected one of {', '.join(QUOTINGS)}")
    if quoting != "csv" and fmt not in tab_separated:
        raise ValueError(f"--quoting {quoting} reads tab-separated files ({', '.join(tab_separated)}); "
                         f"the {fmt} format has none")  # fmt: skip
    return cast(Quoting, quoting)


def quoting_fingerprint(quoting: Quoting) -> tuple[str, ...]:
    """What `quoting` adds to an import's fingerprint: nothing for csv, so that imports made
    before the option existed keep theirs."""
    return () if quoting == "csv" else (f"quoting={quoting}",)
