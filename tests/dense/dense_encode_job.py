"""Run one corpus encoding in its own process (killed with SIGKILL by the resume test)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dense_corpus import as_batches, make_corpus  # noqa: E402
from dense_minilm import load_minilm  # noqa: E402

from odqa.pipelines.dense.sharded_encoding import encode_corpus  # noqa: E402

if __name__ == "__main__":
    out_dir, n, shard_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    encode_corpus(load_minilm(), as_batches(make_corpus(n), 7), out_dir, corpus_fingerprint=f"synthetic-{n}",
                  shard_size=shard_size, batch_size=8, devices=[None], progress=False)
