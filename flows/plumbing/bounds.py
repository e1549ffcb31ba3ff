"""The bounds of the flows' numeric parameters, in their signatures.

A flow's signature is its deployment's Custom run form: Prefect draws the form from it, and its
server checks every run's parameters against that schema. So a bound written here is refused in
the form (`k: -5`, `keep: 0`) before any run starts, and the same bound refuses a Python caller
of the flow. A float bound also refuses nan and inf (no bound compares against them: nan passes
`gt=0`, inf passes `ge=0`), as the command line's `FiniteRange` does. The command line states
each bound again in its options (click ranges, read before a flow is called), and
`tests/ops/test_form_bounds.py` checks that the two agree, field by field.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

AtLeastOne = Annotated[int, Field(ge=1)]  # counts and sizes: passages per question, threads, rounds
AtLeastZero = Annotated[int, Field(ge=0)]  # retries, a node's rank
SEED_MAX = 2**32 - 1  # numpy's and scikit-learn's seeds are 32-bit (t-SNE refuses a larger one mid-run)
Seed = Annotated[int, Field(ge=0, le=SEED_MAX)]  # a random seed
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]  # a memory budget, a timeout
NotNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # seconds to wait, a BM25 k1, a hybrid weight
Share = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]  # a fraction held out, a significance level
UnitInterval = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]  # BM25's b
BM25Negatives = Annotated[int, Field(ge=1, le=30)]  # BM25 hard negatives stored per question (--count)
HnswLinks = Annotated[int, Field(ge=4)]  # FAISS HNSW's M: links per node (--hnsw-m)
