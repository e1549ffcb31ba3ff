"""A small DPR psgs_w100.tsv text: CSV-style quoting with doubled quotes, two passages of one
article (positions 0 and 1), a non-ASCII title. Read by the format tests and imported through the CLI."""

from __future__ import annotations

DPR_TSV = (
    'id\ttext\ttitle\n'
    '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, high priest"\tAaron\n'
    '2\tin the Hebrew Bible and the Quran.\tAaron\n'
    '3\tZürich is the largest city in Switzerland.\tZürich\n'
)
