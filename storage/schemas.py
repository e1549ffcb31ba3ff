"""One pyarrow schema per workspace table.

The schemas are the storage contract of DESIGN.md: every writer is checked against them, and an
empty table still has typed columns in DuckDB, so users' queries work before a stage has run.
Extra tables of later stages register here too, so the catalog knows every table up front.
"""

from __future__ import annotations

import pyarrow as pa

_str_list = pa.list_(pa.string())

SCHEMAS: dict[str, pa.Schema] = {
    "articles": pa.schema(
        [
            ("article_id", pa.int64()),
            ("title", pa.string()),
            ("namespace", pa.int32()),
            ("is_redirect", pa.bool_()),
            ("redirect_target", pa.string()),
            ("source", pa.string()),
        ]
    ),
    "passages": pa.schema(
        [
            ("passage_id", pa.string()),
            ("article_id", pa.int64()),
            ("title", pa.string()),
            ("text", pa.string()),
            ("position", pa.int32()),
            ("source", pa.string()),
        ]
    ),
    "category_links": pa.schema(
        [
            ("page_id", pa.int64()),
            ("title", pa.string()),
            ("namespace", pa.int32()),
            ("category", pa.string()),
            ("kind", pa.string()),  # page | subcat | file: the MediaWiki cl_type of the edge
            ("source", pa.string()),
        ]
    ),
    "domains": pa.schema(
        [
            ("title", pa.string()),
            ("domain", pa.string()),
            ("depth", pa.int32()),
        ]
    ),
    "questions": pa.schema(
        [
            ("question_id", pa.string()),
            ("dataset", pa.string()),
            ("split", pa.string()),
            ("question", pa.string()),
            ("answers", _str_list),
            ("relation", pa.string()),
            ("subject", pa.string()),
            ("subject_id", pa.string()),
            ("positive_ids", _str_list),
            ("hard_negative_ids", _str_list),
            ("domains", _str_list),
            # null: the positive_ids came with the data; else how `odqa positives` derived them by
            # distant supervision from the answers (`bm25`, `dense:<model>`), so R@K keeps using the
            # answers and qrels metrics say which judgments were derived
            ("positives_from", pa.string()),
        ]
    ),
    "qrels": pa.schema(
        [
            ("dataset", pa.string()),
            ("split", pa.string()),
            ("question_id", pa.string()),
            ("passage_id", pa.string()),
            ("relevance", pa.int32()),
        ]
    ),
    # PAQ's flipped training variant (thesis 5.1): per passage, its generated questions are the
    # positives and questions of other passages of the split the negatives.
    "flipped": pa.schema(
        [
            ("passage_id", pa.string()),
            ("dataset", pa.string()),
            ("split", pa.string()),
            ("positive_questions", _str_list),
            ("negative_questions", _str_list),
        ]
    ),
    "runs": pa.schema(
        [
            ("run", pa.string()),
            ("question_id", pa.string()),
            ("passage_id", pa.string()),
            ("rank", pa.int32()),
            ("score", pa.float32()),
        ]
    ),
    "metrics": pa.schema(
        [
            ("run", pa.string()),
            ("dataset", pa.string()),
            ("split", pa.string()),
            ("metric", pa.string()),
            ("value", pa.float64()),
            ("group", pa.string()),
            ("created_at", pa.timestamp("us", tz="UTC")),
            ("config", pa.string()),
        ]
    ),
    "models": pa.schema(
        [
            ("model_id", pa.string()),
            ("arch", pa.string()),
            ("parameters", pa.int64()),
            ("path", pa.string()),
            ("base", pa.string()),
            ("trained_on", pa.string()),
            ("created_at", pa.timestamp("us", tz="UTC")),
            ("config", pa.string()),
        ]
    ),
    # Passages' token ids, stored once per tokenization (storage/passage_tokens.py): ids as
    # little-endian uint16 (uint32 for vocabularies over 65,536) bytes, segment ids as uint8.
    "passage_tokens": pa.schema(
        [
            ("tokenization", pa.string()),  # hash of the three below and the id width
            ("tokenizer", pa.string()),  # fingerprint of the tokenizer's content, not its name
            ("passage_input", pa.string()),  # pair | joined-lowercase
            ("max_length", pa.int32()),
            ("passage_key", pa.binary(16)),  # hash of passage id, title and text
            ("passage_id", pa.string()),
            ("length", pa.int32()),  # tokens in the passage
            ("input_ids", pa.binary()),
            ("type_ids", pa.binary()),
            ("id_width", pa.int8()),  # bytes per stored id: 2 or 4
            ("passages_version", pa.string()),  # the passages snapshot the row was tokenized for
        ]
    ),
    # `odqa reproduce`: each paper figure of a setup beside the run's own (storage/reproduction.py).
    "reproduction": pa.schema(
        [
            ("setup", pa.string()),
            ("retriever", pa.string()),  # the run's retriever, as the side-by-side table labels it
            ("paper_row", pa.string()),  # the model as the paper names it
            ("dataset", pa.string()),
            ("split", pa.string()),
            ("metric", pa.string()),
            ("paper", pa.float64()),  # the paper's figure, as a fraction
            ("measured", pa.float64()),  # the run's figure (null when the run has none)
            ("difference", pa.float64()),  # measured - paper
            ("run", pa.string()),  # the evaluated run it comes from
            ("source", pa.string()),  # the paper's table and section
            ("limited", pa.bool_()),  # a smoke-sized run (--max-steps / --limit): not the paper's scale
            ("created_at", pa.timestamp("us", tz="UTC")),
        ]
    ),
    # Training curves: one row per logged optimizer step of a registered model (`odqa train`),
    # written in the same commit as its `models` row.
    "training_log": pa.schema(
        [
            ("model_id", pa.string()),
            ("step", pa.int64()),
            ("loss", pa.float64()),
            ("lr", pa.float64()),
            ("examples_per_s", pa.float64()),
            ("elapsed_s", pa.float64()),
            ("cpu_s", pa.float64()),  # training process CPU seconds (user + system), resumes included
            ("created_at", pa.timestamp("us", tz="UTC")),
        ]
    ),
}


def schema_for(table: str) -> pa.Schema:
    """The schema of `table`, or a clear error naming the known tables."""
    try:
        return SCHEMAS[table]
    except KeyError:
        raise KeyError(f"unknown table {table!r}; known tables: {', '.join(sorted(SCHEMAS))}") from None


def row_schema(table: str, without: tuple[str, ...] = ("source",)) -> pa.Schema:
    """The columns a producing step fills: the table's schema less those the writer adds.

    Pipeline steps build their Arrow output with this, so the table layout has one definition.
    """
    schema = schema_for(table)
    for name in without:
        schema = schema.remove(schema.get_field_index(name))
    return schema


def conform(data: pa.Table | pa.RecordBatch, table: str) -> pa.Table:
    """Cast `data` to the table's schema: missing nullable columns become nulls, order is fixed.

    Writers build rows from dicts in several places; conforming here means a typo'd or missing
    column fails loudly at write time instead of producing a file DuckDB reads differently.
    """
    schema = schema_for(table)
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    unknown = set(data.column_names) - set(schema.names)
    if unknown:
        raise ValueError(f"table {table!r} has no column(s) {sorted(unknown)}; expected {schema.names}")
    columns = []
    for field in schema:
        if field.name in data.column_names:
            columns.append(data.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(data.num_rows, type=field.type))
    return pa.Table.from_arrays(columns, schema=schema)
