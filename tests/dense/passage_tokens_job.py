"""Tokenize a corpus into a workspace's passage_tokens, one committed part per chunk, slowly
(killed with SIGKILL by the resume test in test_passage_tokens.py)."""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dense_corpus import make_corpus  # noqa: E402

from odqa.pipelines.dense.stored_tokens import TokenFeed  # noqa: E402
from odqa.storage import Workspace  # noqa: E402
from odqa.storage.passage_tokens import PassageTokenStore  # noqa: E402

if __name__ == "__main__":
    workspace, tokenizer_file, n, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    tokenizer = pickle.loads(Path(tokenizer_file).read_bytes())
    corpus = make_corpus(n, seed=3)
    feed = TokenFeed(tokenizer, PassageTokenStore(Workspace.resolve(workspace), tokenizer.tokenization()), "v1", 0)
    for start in range(0, n, chunk):
        part = corpus.slice(start, chunk)
        feed.rows(part.column("passage_id").combine_chunks(), part.column("title").to_pylist(),
                  part.column("text").to_pylist())
        time.sleep(0.15)
