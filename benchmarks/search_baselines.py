"""What `odqa search` is measured against: one question searched by a fresh process with the
libraries alone (Issue 32, `benchmarks/RESULTS.md`).

    python benchmarks/search_baselines.py bm25 INDEX_DIR "question" [--k 5]
    python benchmarks/search_baselines.py dense MODEL_DIR FAISS_INDEX_DIR "question" [--k 5]

bm25: pyserini's `LuceneSearcher` over the Lucene index `odqa bm25 index` built (k1 0.9, b 0.4,
as odqa searches), printing rank, score, id and the stored text. dense: a sentence-transformers
model encodes the question and FAISS searches the flat index `odqa index build` wrote, printing
rank, score and passage id (the folder's `*.faiss` file and its `ids.parquet`). Both print what a user
would read, so the comparison includes output, like `odqa search`'s.
"""

from __future__ import annotations

import argparse
import json
import os


def bm25(index: str, question: str, k: int) -> None:
    # pyserini.search.lucene imports its OpenAI encoder, which refuses to import without a key
    os.environ.setdefault("OPENAI_API_KEY", "unused")
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(index)
    searcher.set_bm25(0.9, 0.4)
    for rank, hit in enumerate(searcher.search(question, k), start=1):
        raw = searcher.doc(hit.docid).raw() or ""
        text = json.loads(raw).get("contents", raw) if raw.startswith("{") else raw
        print(f"{rank:>3}. [{hit.score:.3f}] ({hit.docid})\n     {text[:240]}")


def dense(model: str, index_dir: str, question: str, k: int) -> None:
    from pathlib import Path

    import faiss
    import pyarrow.parquet as pq
    from sentence_transformers import SentenceTransformer

    encoder = SentenceTransformer(model, device="cpu")
    (index_file,) = Path(index_dir).glob("*.faiss")
    index = faiss.read_index(str(index_file))
    ids = pq.read_table(Path(index_dir) / "ids.parquet").column(0).to_pylist()
    vector = encoder.encode([question], convert_to_numpy=True)
    scores, rows = index.search(vector.astype("float32"), k)
    for rank, (score, row) in enumerate(zip(scores[0], rows[0], strict=True), start=1):
        print(f"{rank:>3}. [{score:.3f}] ({ids[row]})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["bm25", "dense"])
    parser.add_argument("paths_and_question", nargs="+")
    parser.add_argument("--k", type=int, default=5)
    args = parser.parse_args()
    *paths, question = args.paths_and_question
    if args.kind == "bm25":
        bm25(*paths, question, args.k)
    else:
        dense(*paths, question, args.k)


if __name__ == "__main__":
    main()
