"""What a store's first lookup costs a shard task of a mapped encode (issue 38's review): with the
lookup shared by the stores of a process, against each store building its own.

    .venv/bin/python benchmarks/bench_token_lookup.py [--passages 2000000] [--parts 200]
        [--stores 8] [--json benchmarks/results/token_lookup.json]

A scratch workspace's `passage_tokens` table holds ``--parts`` committed parts of synthetic rows
(16-byte keys; the key column is all a lookup reads). ``--stores`` stores are then made one after
another, as the shard tasks of one worker process make them, and each finds one shard's keys
(10,000 passages). *Own lookup*: the process's shared lookups are dropped before each store, so
every store reads every part's key column and sorts the keys, as each did before the sharing.
*Shared*: the first store builds the lookup, the others find it built. Interleaved, best and
median of ``--repeats``; the 21M-passage projection scales the own-lookup cost linearly.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from odqa.storage import Workspace, passage_tokens  # noqa: E402
from odqa.storage.passage_tokens import PassageTokenStore, Tokenization, TokenRows  # noqa: E402

TOKENIZATION = Tokenization(tokenizer="bench", passage_input="title-text-pair", max_length=256, id_width=2)
SHARD = 10_000


def fill(ws: Workspace, passages: int, parts: int) -> np.ndarray:
    """Commit `parts` parts of passages whose rows are 8 token ids each; returns every key."""
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**63, size=(passages, 2), dtype=np.uint64)
    store = PassageTokenStore(ws, TOKENIZATION)
    for chunk in np.array_split(np.arange(passages), parts):
        lengths = np.full(len(chunk), 8, np.int32)
        rows = TokenRows(np.ones(8 * len(chunk), np.uint16), np.zeros(8 * len(chunk), np.uint8), lengths)
        store.add(keys[chunk], pa.array([f"p{i}" for i in chunk]), rows, "v1")
    return keys


def stores_seconds(ws: Workspace, keys: np.ndarray, stores: int, shared: bool) -> float:
    started = time.perf_counter()
    for n in range(stores):
        if not shared:
            passage_tokens._lookups.clear()
        shard = keys[(n * SHARD) % len(keys):][:SHARD]
        found, _ = PassageTokenStore(Workspace.resolve(ws.root), TOKENIZATION).find(shard)
        assert found.all()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=2_000_000)
    parser.add_argument("--parts", type=int, default=200)
    parser.add_argument("--stores", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        ws = Workspace.resolve(Path(scratch) / "ws")
        keys = fill(ws, args.passages, args.parts)
        own, shared = [], []
        for _ in range(args.repeats):
            own.append(stores_seconds(ws, keys, args.stores, shared=False))
            passage_tokens._lookups.clear()
            shared.append(stores_seconds(ws, keys, args.stores, shared=True))
    per_store_own = min(own) / args.stores
    result = {
        "passages": args.passages, "parts": args.parts, "stores": args.stores, "repeats": args.repeats,
        "own_lookup_s": {"best": round(min(own), 3), "median": round(statistics.median(own), 3)},
        "shared_s": {"best": round(min(shared), 3), "median": round(statistics.median(shared), 3)},
        "ratio_best": round(min(own) / min(shared), 2),
        "own_lookup_per_store_s": round(per_store_own, 3),
        "own_lookup_per_store_21m_projected_s": round(per_store_own * 21_000_000 / args.passages, 1),
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
